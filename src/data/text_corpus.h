#pragma once
// Text for language models, torch-free: a file or a directory of files cut into documents,
// the built-in byte tokenizer, and the fixed-width token rows the trainer batches.
//
// Documents: a file is cut on separator lines (by default a line holding only "%", the
// fortune format; "blank" cuts on blank lines, "line" makes every line a document, any other
// text is a literal separator line). A directory contributes its regular files in name order;
// symbolic links to files already read and binary files (a NUL byte: fortune's .dat indexes)
// are skipped and counted.
//
// Tokens: the byte tokenizer maps each byte to its value and adds one end-of-text token (256):
// vocabulary 257. A document becomes [eot, bytes..., eot]; its targets are the tokens after
// each position (the shift), so the model predicts every byte and the document's end.
//
//   TextCorpus corpus = read_text_corpus("/usr/share/games/fortunes", "%");
//   TokenRows rows = document_rows(corpus.documents, /*seq_len=*/256);
//   rows.targets[r * rows.width + t];  // kIgnoreTarget past the row's length
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_rows.h"
#include "data/tokenizer.h"

namespace bigbatch {

inline constexpr int64_t kByteVocabulary = 257;
inline constexpr int32_t kEndOfText = 256;

struct TextCorpus {
  std::vector<std::string> documents;  // in file order, none empty
  int64_t files = 0;                   // files read
  int64_t skipped_files = 0;           // binary files and links to files already read
  int64_t bytes = 0;                   // bytes in the documents
};

// Cuts `text` into documents on `separator` ("%" by default; "blank", "line", or a literal
// line). Lines keep their newlines inside a document; the separator lines themselves and
// documents that are empty or only whitespace are dropped. `separator_lines` (if given) gets
// how many separators were found.
std::vector<std::string> split_documents(std::string_view text, const std::string& separator,
                                         int64_t* separator_lines = nullptr);

// Reads a file or a directory; throws bigbatch::Error (Data) for a path that is not there, a
// directory with no text, or a corpus without documents (naming the separator when it never
// occurred).
TextCorpus read_text_corpus(const std::string& path, const std::string& separator);

// A JSON Lines file: one object per line, the document in string field `field` (blank lines
// skipped). A line that is not a JSON object, lacks the field or holds a non-string there is a
// bigbatch::Error (Data) naming the file, the line number and the fix.
TextCorpus read_jsonl_corpus(const std::string& path, const std::string& field);
// The same for the file's text (`path` names it in errors).
TextCorpus parse_jsonl_corpus(std::string_view text, const std::string& field,
                              const std::string& path);

// The byte tokenizer's rows (data/token_rows.h), inputs padded with end-of-text.
// --sequences documents: each document one row, cut at seq_len + 1 tokens.
TokenRows document_rows(const std::vector<std::string>& documents, int64_t seq_len);
// --sequences packed: documents joined by end-of-text into one stream, cut into blocks of
// seq_len + 1 tokens (nanoGPT, Megatron); the tail that fills no block is dropped.
TokenRows packed_rows(const std::vector<std::string>& documents, int64_t seq_len);

}  // namespace bigbatch
