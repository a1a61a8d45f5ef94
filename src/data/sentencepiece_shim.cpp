// The one translation unit that includes SentencePiece, built as a module that bigbatch loads
// with dlopen(RTLD_LOCAL | RTLD_DEEPBIND) when --tokenizer sentencepiece is used, behind a C
// interface of its own (data/sentencepiece_tokenizer.cpp).
//
// Why not link it: Debian's libsentencepiece carries its own protobuf-lite and exports it, and
// libtorch loads the system libprotobuf. Linked into one process, the two interpose each
// other's symbols and the process crashes in protobuf's static initialisation before main.
// Loaded locally and deep-bound, SentencePiece resolves its protobuf to its own copy and
// nothing else sees it.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

void copy_message(const std::string& message, char* error, size_t error_size) {
  if (error_size == 0)
    return;
  const size_t n = std::min(message.size(), error_size - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

}  // namespace

extern "C" {

void* bigbatch_spm_load(const char* path, char* error, size_t error_size) {
  try {
    auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = processor->Load(path);
    if (!status.ok()) {
      copy_message(status.ToString(), error, error_size);
      return nullptr;
    }
    return processor.release();
  } catch (const std::exception& e) {
    copy_message(e.what(), error, error_size);
    return nullptr;
  }
}

void bigbatch_spm_free(void* processor) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(processor);
}

int bigbatch_spm_piece_size(const void* processor) {
  return static_cast<const sentencepiece::SentencePieceProcessor*>(processor)->GetPieceSize();
}

int bigbatch_spm_eos_id(const void* processor) {
  return static_cast<const sentencepiece::SentencePieceProcessor*>(processor)->eos_id();
}

// Calls emit(context, id, bytes) for each piece of `text`, `bytes` being the length of the span
// of the original text the piece covers. Returns 0, or -1 when encoding failed.
int bigbatch_spm_encode(const void* processor, const char* text, size_t size,
                        void (*emit)(void* context, int id, int bytes), void* context) {
  try {
    const auto* spm = static_cast<const sentencepiece::SentencePieceProcessor*>(processor);
    const auto pieces = spm->EncodeAsImmutableProto(std::string(text, size));
    for (const auto& piece : pieces.pieces())
      emit(context, static_cast<int>(piece.id()), static_cast<int>(piece.end() - piece.begin()));
    return 0;
  } catch (...) {
    return -1;
  }
}

// Calls emit(context, text, size) once with the text of `ids`. Returns 0, or -1.
int bigbatch_spm_decode(const void* processor, const int* ids, size_t count,
                        void (*emit)(void* context, const char* text, size_t size), void* context) {
  try {
    const auto* spm = static_cast<const sentencepiece::SentencePieceProcessor*>(processor);
    const std::string text = spm->DecodeIds(std::vector<int>(ids, ids + count));
    emit(context, text.data(), text.size());
    return 0;
  } catch (...) {
    return -1;
  }
}

}  // extern "C"
