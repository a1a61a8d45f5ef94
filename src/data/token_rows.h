#pragma once
// Token documents as the fixed-width rows the trainer batches, torch-free. Whatever made the
// tokens (the byte tokenizer, sentencepiece, a token file), a row is cut the same way:
//
//   --sequences documents: each document one row, cut at seq_len + 1 tokens;
//   --sequences packed:    every document joined into one stream (in order, as they are: a
//                          tokenizer or a token file put its own separators in), cut into
//                          blocks of seq_len + 1 tokens, nanoGPT and Megatron style.
//
// A row of n + 1 tokens has n inputs and n targets (the shift): its items are those n target
// tokens, counted exactly; positions past them hold `pad` as input and kIgnoreTarget as target.
//
// Rows are a table over the tokens (where each row starts, how many it predicts), not copies of
// them: a row's inputs and targets are read from the documents when a batch is gathered. Token
// files stay where they lie, memory-mapped (TokenSpans), so a corpus larger than memory trains
// with a table of 24 bytes per row beside it.
//
//   TokenDocuments docs;
//   docs.add({5, 9, 2});                        // one document of three tokens
//   TokenRows rows = document_rows(docs, /*seq_len=*/256, /*pad=*/0);
//   rows.fill(0, inputs, targets, 2);           // {5, 9}, {9, 2}
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace bigbatch {

// PyTorch's cross_entropy ignore_index default: targets of padding.
inline constexpr int32_t kIgnoreTarget = -100;

// Token ids end to end in spans of memory (memory-mapped files), each of one integer width,
// read in place. The ids were checked when the spans were added (data/token_files.h): reading
// does not check them again.
class TokenSpans {
 public:
  // `count` ids of `bytes` bytes each (1, 2, 4 or 8; little-endian, signed or not) at `data`,
  // kept alive by `owner` (null: the caller keeps them alive for as long as these spans).
  void append(std::shared_ptr<const void> owner, const uint8_t* data, int64_t count, int bytes,
              bool is_signed);
  int64_t size() const { return size_; }
  bool empty() const { return spans_.empty(); }
  // Ids [begin, begin + count) into `out`.
  void read(int64_t begin, int64_t count, int64_t* out) const;

 private:
  struct Span {
    int64_t first = 0;  // position of its first id in the whole
    const uint8_t* data = nullptr;
    int64_t count = 0;
    int bytes = 0;
    bool is_signed = false;
  };
  std::vector<Span> spans_;
  std::vector<std::shared_ptr<const void>> owners_;
  int64_t size_ = 0;
};

// Documents of token ids, stored end to end: document d is tokens [starts[d], starts[d + 1]).
// The ids are in `tokens` (a tokenizer made them, or a test) or, for token files, in `spans`
// (memory-mapped; `tokens` stays empty). `bytes`, where the text behind the tokens is known (a
// tokenizer made them), holds the text bytes each token stands for (bits per byte are the loss
// over these; 0 for end-of-text); empty for token files, whose rows then count no bytes.
struct TokenDocuments {
  std::vector<int32_t> tokens;
  TokenSpans spans;
  std::vector<int32_t> bytes;
  std::vector<int64_t> starts{0};
  int64_t documents() const { return static_cast<int64_t>(starts.size()) - 1; }
  int64_t length(int64_t d) const { return starts[size_t(d) + 1] - starts[size_t(d)]; }
  // Tokens in all documents, wherever they are held.
  int64_t size() const {
    return spans.empty() ? static_cast<int64_t>(tokens.size()) : spans.size();
  }
  // Ids [begin, begin + count) of the whole into `out`.
  void read(int64_t begin, int64_t count, int64_t* out) const;
  // Every id, in memory (tests, fuzzing: small data).
  std::vector<int32_t> all_tokens() const;
  void add(const std::vector<int32_t>& document);
  // Ends the document whose tokens were appended since the last one ended (to `tokens`, or to
  // `spans`: then the document ends at the spans' end).
  void close_document() { starts.push_back(size()); }
};

// Rows over documents that they share (and keep alive).
struct TokenRows {
  int64_t width = 0;  // positions per row: seq_len
  int32_t pad = 0;    // the input id past a row's length
  std::shared_ptr<const TokenDocuments> source;
  std::vector<int64_t> starts;   // each row's first token, as a position in `source`
  std::vector<int64_t> lengths;  // target tokens per row (the row's items); it reads lengths + 1
  std::vector<int64_t> bytes;    // text bytes among them (tokens with no text excluded)
  int64_t cut_documents = 0;     // documents longer than a row, cut at seq_len + 1 tokens
  int64_t cut_tokens = 0;        // their tokens past the cut: in no row, never trained on
  int64_t short_documents = 0;   // documents of fewer than 2 tokens: nothing to predict
  int64_t rows() const { return static_cast<int64_t>(lengths.size()); }

  // Row `row`'s first `positions` (<= width) inputs and targets into `inputs` and `targets`:
  // the row's tokens shifted by one, then `pad` and kIgnoreTarget.
  void fill(int64_t row, int64_t* inputs, int64_t* targets, int64_t positions) const;
  // The rows at `rows`, in that order, over the same documents.
  TokenRows select(const std::vector<int64_t>& rows) const;
  // Every row's inputs (or targets), `width` per row, in memory (tests, fuzzing: small data).
  std::vector<int32_t> inputs() const;
  std::vector<int32_t> targets() const;

 private:
  std::vector<int32_t> flat(bool of_targets) const;
};

// Throws bigbatch::Error (Config) for seq_len < 2.
TokenRows document_rows(std::shared_ptr<const TokenDocuments> documents, int64_t seq_len,
                        int32_t pad);
// The tail that fills no block is dropped.
TokenRows packed_rows(std::shared_ptr<const TokenDocuments> documents, int64_t seq_len,
                      int32_t pad);
// The same on a copy of `documents` (small data: tests, tokenised text).
TokenRows document_rows(TokenDocuments documents, int64_t seq_len, int32_t pad);
TokenRows packed_rows(TokenDocuments documents, int64_t seq_len, int32_t pad);

}  // namespace bigbatch
