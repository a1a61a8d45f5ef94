#pragma once
// Pre-tokenised data as the field writes it, torch-free: `--dataset tokens:PATH`.
//
//  - Megatron-LM / fairseq indexed datasets: PREFIX.bin (the tokens) beside PREFIX.idx
//    ("MMIDIDX\0\0", version 1, a dtype code, the sequence count, the document-index count,
//    then int32 sequence lengths, int64 byte offsets into the .bin and int64 document starts
//    as sequence indices). Documents are recorded (--sequences documents can take them).
//  - llm.c shards: a header of 256 int32 (magic 20240520 with version 1 for uint16 tokens, or
//    20240801 with version 7 for uint32; [2] the token count, checked against the file size),
//    then the tokens. One stream.
//  - headerless token files (nanoGPT's train.bin, numpy's tofile): only with --token-dtype
//    uint16|uint32, since nothing in them says what they hold. One stream, as llm.c's.
// --sequences auto packs token files, as Megatron's and llm.c's own loaders do.
//
// PATH is such a .bin file, a Megatron prefix (PATH.bin and PATH.idx), a directory whose
// .bin files are read in name order (shards; one holding both train and val shards is refused),
// or a shell pattern over one directory's names ("data/fineweb_train_*.bin"). Files are
// memory-mapped and checked whole before any token is taken: tables that point outside the file,
// counts the sizes contradict, unknown dtypes and token ids that are negative or beyond int32 are a
// bigbatch::Error (Data) naming the file, the field and the fix. Nothing is guessed. The tokens
// are not copied: the documents read them from the mappings, which they keep open.
//
//   TokenFiles files = read_token_files("data/fineweb_train_000001.bin", TokenDtype::Auto);
//   files.documents.documents();   // 1: an llm.c shard is one stream
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "data/token_dtype.h"
#include "data/token_rows.h"

namespace bigbatch {

struct TokenFiles {
  TokenDocuments documents;
  bool has_documents = false;  // every file records document boundaries (Megatron), or
                               // cut_streams_at found them
  int64_t eot_id = -1;         // the id cut_streams_at cut at (-1: none)
  int64_t stream_files = 0;    // files that are one stream of tokens (llm.c, headerless)
  int64_t indexed_files = 0;   // files whose index records their documents (Megatron)
  int64_t files = 0;
  int64_t largest_token = -1;  // the largest id in any file
  std::string format;          // e.g. "llm.c shard (uint16)", "Megatron indexed dataset (uint16)"
};

TokenFiles read_token_files(const std::string& path, TokenDtype dtype);

// --eot-id: the streams cut into documents after each occurrence of `eot_id`, which stays the
// last token of the document it ends (nanoGPT appends it to every document; llm.c puts it
// first, which makes the stream's first token a document of its own, skipped as too short to
// predict anything). No document spans two files. Throws bigbatch::Error (Config) for files
// that record their documents (Megatron) and (Data) when the id never occurs; `name` names the
// data in errors.
void cut_streams_at(TokenFiles& files, int64_t eot_id, const std::string& name);

// The parsers behind it, on bytes in memory (fuzzing, tests); each checks every id and appends
// the tokens to `out` where they lie — `out` reads `data` for as long as it lives, which `owner`
// (or, when null, the caller) keeps alive — and names the file as `name` in errors.
void parse_megatron_tokens(const uint8_t* index, size_t index_size, const uint8_t* data,
                           size_t data_size, const std::string& name, TokenFiles& out,
                           std::shared_ptr<const void> owner = {});
void parse_llmc_tokens(const uint8_t* data, size_t size, const std::string& name, TokenFiles& out,
                       std::shared_ptr<const void> owner = {});
void parse_raw_tokens(const uint8_t* data, size_t size, TokenDtype dtype, const std::string& name,
                      TokenFiles& out, std::shared_ptr<const void> owner = {});

}  // namespace bigbatch
