// libFuzzer target: any bytes, as a Megatron .idx/.bin pair (split at a point the first bytes
// choose), an llm.c shard or a headerless file, either become token documents or are a
// bigbatch::Error; documents then keep their invariants and make rows of either kind, also once
// cut at an end-of-text id (--eot-id) the input chooses.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "data/token_files.h"
#include "data/token_rows.h"

namespace {

void check(bool ok) {
  if (!ok)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3)
    return 0;
  const uint8_t mode = data[0] % 4;
  const size_t split = (size_t(data[1]) << 4) % (size - 2);
  const int64_t seq_len = 2 + data[2] % 31;
  const uint8_t* rest = data + 3;
  const size_t rest_size = size - 3;
  bigbatch::TokenFiles files;
  try {
    switch (mode) {
      case 0:
        bigbatch::parse_megatron_tokens(rest, split, rest + split, rest_size - split, "f.bin",
                                        files);
        break;
      case 1:
        bigbatch::parse_llmc_tokens(rest, rest_size, "f.bin", files);
        break;
      default:
        bigbatch::parse_raw_tokens(
            rest, rest_size,
            mode == 2 ? bigbatch::TokenDtype::Uint16 : bigbatch::TokenDtype::Uint32, "f.bin",
            files);
        break;
    }
  } catch (const bigbatch::Error&) {
    return 0;
  }
  const auto check_documents = [&](const bigbatch::TokenFiles& f) {
    const auto& docs = f.documents;
    check(docs.starts.front() == 0 && docs.starts.back() == docs.size());
    for (int64_t d = 0; d < docs.documents(); ++d)
      check(docs.length(d) >= 0);
    for (int32_t t : docs.all_tokens())
      check(t >= 0 && t <= f.largest_token);
    for (const auto& rows :
         {bigbatch::document_rows(docs, seq_len, 0), bigbatch::packed_rows(docs, seq_len, 0)}) {
      check(rows.inputs().size() == size_t(rows.rows() * seq_len));
      for (int64_t length : rows.lengths)
        check(length >= 1 && length <= seq_len);
    }
  };
  check_documents(files);
  // The id the input's first byte names (ids this small occur in fuzzed streams).
  const int64_t tokens_before = files.documents.size();
  try {
    bigbatch::cut_streams_at(files, data[0] / 4, "f.bin");
  } catch (const bigbatch::Error&) {
    return 0;
  }
  check(files.has_documents && files.documents.size() == tokens_before);
  check_documents(files);
  return 0;
}
