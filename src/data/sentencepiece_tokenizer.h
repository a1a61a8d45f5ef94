#pragma once
// `--tokenizer sentencepiece:FILE.model`: a trained SentencePiece model (spm_train writes one)
// through Debian's libsentencepiece. Its end-of-sentence id separates documents; each piece
// counts the bytes of the original text it covers (the span SentencePiece reports), so bits per
// byte stay comparable with the byte tokenizer's. Text must be UTF-8: an invalid byte is a
// bigbatch::Error (Data) naming its offset, rather than SentencePiece's silent replacement.
//
// SentencePiece lives in a module of its own, libbigbatch_sentencepiece.so, loaded on first use
// (data/sentencepiece_shim.cpp says why it cannot be linked beside libtorch). It is looked for
// in $BIGBATCH_SENTENCEPIECE_MODULE, beside the running program, in the install's
// lib/bigbatch and in the build tree, in that order.
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace bigbatch {

struct SentencePieceModule;

class SentencePieceTokenizer final : public TextTokenizer {
 public:
  // Throws bigbatch::Error (Data) for a file that is missing or not a model, (Config) for a
  // model without an end-of-sentence id, (Io) when the module cannot be loaded.
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  int64_t vocabulary() const override { return vocabulary_; }
  int32_t end_of_text() const override { return end_of_text_; }
  void encode(std::string_view text, std::vector<int32_t>& ids,
              std::vector<int32_t>& bytes) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string describe() const override;

 private:
  const SentencePieceModule& module_;
  std::string path_;
  void* processor_ = nullptr;
  int64_t vocabulary_ = 0;
  int32_t end_of_text_ = -1;
};

}  // namespace bigbatch
