#pragma once
// Tokenizers: text to token ids and back, torch-free. `--tokenizer byte` (the default: each
// byte its own id, 256 end-of-text; vocabulary 257, needs nothing) or
// `--tokenizer sentencepiece:FILE.model` (a trained SentencePiece model, through Debian's
// libsentencepiece; its end-of-sentence id marks documents' ends).
//
// Every tokenizer says how many bytes of the text each id it produced stands for, so bits per
// byte are the loss over the text's own bytes whatever the vocabulary.
//
//   auto tokenizer = make_tokenizer("sentencepiece:corpus.model");
//   TokenDocuments docs = tokenize_documents(corpus.documents, *tokenizer, /*packed=*/false, name);
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_rows.h"

namespace bigbatch {

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  virtual int64_t vocabulary() const = 0;
  // The id between documents (and before the first): the model learns to predict their ends.
  virtual int32_t end_of_text() const = 0;
  // Appends `text`'s ids to `ids` and the text bytes each stands for to `bytes`. Throws
  // bigbatch::Error (Data) for text the tokenizer cannot read.
  virtual void encode(std::string_view text, std::vector<int32_t>& ids,
                      std::vector<int32_t>& bytes) const = 0;
  // The text of `ids` (end-of-text and other control ids are left out).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // For the start of a run: "byte tokenizer (vocabulary 257)".
  virtual std::string describe() const = 0;
};

// "byte" or "sentencepiece:FILE". Throws bigbatch::Error (Config) for another name, (Data) for
// a model file that is missing or not a SentencePiece model.
std::unique_ptr<TextTokenizer> make_tokenizer(const std::string& spec);
const TextTokenizer& byte_tokenizer();

// Documents as token documents with their bytes: each [eot, ids..., eot], or with `packed` one
// stream [eot, ids..., eot, ids..., eot]. An error names the document (its index, from 1)
// and `name`.
TokenDocuments tokenize_documents(const std::vector<std::string>& documents,
                                  const TextTokenizer& tokenizer, bool packed,
                                  const std::string& name);

}  // namespace bigbatch
