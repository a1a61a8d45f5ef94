#include "data/sentencepiece_tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/text.h"

#ifndef BIGBATCH_SENTENCEPIECE_INSTALLED
#define BIGBATCH_SENTENCEPIECE_INSTALLED ""
#endif
#ifndef BIGBATCH_SENTENCEPIECE_BUILT
#define BIGBATCH_SENTENCEPIECE_BUILT ""
#endif

namespace bigbatch {

namespace fs = std::filesystem;

// The module's C interface (data/sentencepiece_shim.cpp).
struct SentencePieceModule {
  void* (*load)(const char* path, char* error, size_t error_size) = nullptr;
  void (*free)(void* processor) = nullptr;
  int (*piece_size)(const void* processor) = nullptr;
  int (*eos_id)(const void* processor) = nullptr;
  int (*encode)(const void* processor, const char* text, size_t size,
                void (*emit)(void* context, int id, int bytes), void* context) = nullptr;
  int (*decode)(const void* processor, const int* ids, size_t count,
                void (*emit)(void* context, const char* text, size_t size),
                void* context) = nullptr;
};

namespace {

constexpr const char* kModuleName = "libbigbatch_sentencepiece.so";

std::vector<std::string> module_candidates() {
  std::vector<std::string> paths;
  if (const char* given = std::getenv("BIGBATCH_SENTENCEPIECE_MODULE"); given && *given)
    paths.emplace_back(given);
  std::error_code error;
  const fs::path program = fs::read_symlink("/proc/self/exe", error);
  if (!error)
    paths.push_back((program.parent_path() / kModuleName).string());
  for (const char* path : {BIGBATCH_SENTENCEPIECE_INSTALLED, BIGBATCH_SENTENCEPIECE_BUILT}) {
    if (*path)
      paths.emplace_back(path);
  }
  return paths;
}

template <typename Function>
void bind(void* handle, const char* name, Function& function, const std::string& path) {
  function = reinterpret_cast<Function>(dlsym(handle, name));
  if (!function) {
    dlclose(handle);
    throw Error(ErrorKind::Io,
                "'" + path + "' lacks " + name + ": it is not this bigbatch's module",
                "rebuild bigbatch (scripts/setup.sh) so that the module matches the program");
  }
}

// Loaded once, kept for the process's life (unloading a C++ library with static state is not
// worth its risks).
const SentencePieceModule& sentencepiece_module() {
  static const SentencePieceModule module = [] {
    std::string tried;
    for (const auto& path : module_candidates()) {
      std::error_code error;
      if (!fs::is_regular_file(path, error)) {
        tried += (tried.empty() ? "" : ", ") + path;
        continue;
      }
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!handle) {
        const char* why = dlerror();
        throw Error(ErrorKind::Io,
                    "cannot load the sentencepiece module '" + path + "': " + (why ? why : "?"),
                    "install Debian's libsentencepiece0 (scripts/setup.sh does), or use "
                    "--tokenizer byte");
      }
      SentencePieceModule m;
      bind(handle, "bigbatch_spm_load", m.load, path);
      bind(handle, "bigbatch_spm_free", m.free, path);
      bind(handle, "bigbatch_spm_piece_size", m.piece_size, path);
      bind(handle, "bigbatch_spm_eos_id", m.eos_id, path);
      bind(handle, "bigbatch_spm_encode", m.encode, path);
      bind(handle, "bigbatch_spm_decode", m.decode, path);
      return m;
    }
    throw Error(ErrorKind::Io,
                std::string("bigbatch's sentencepiece module ") + kModuleName +
                    " is not installed (looked in: " + tried + ")",
                "build bigbatch with scripts/setup.sh, or point $BIGBATCH_SENTENCEPIECE_MODULE "
                "at the module; --tokenizer byte needs none");
  }();
  return module;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : module_(sentencepiece_module()), path_(model_path) {
  std::error_code error;
  if (!fs::is_regular_file(model_path, error)) {
    // A directory or a device is there, but is no model file: said as what it is.
    const bool there = fs::exists(model_path, error);
    throw Error(ErrorKind::Data,
                "sentencepiece model '" + model_path + "' " +
                    (!there                                ? "does not exist"
                     : fs::is_directory(model_path, error) ? "is a directory, not a .model file"
                                                           : "is not a regular file"),
                "train one with spm_train --input=corpus.txt --model_prefix=m --vocab_size=2000 "
                "and pass --tokenizer sentencepiece:m.model");
  }
  char message[512] = {0};
  processor_ = module_.load(model_path.c_str(), message, sizeof message);
  if (!processor_) {
    throw Error(ErrorKind::Data,
                "sentencepiece model '" + model_path + "' cannot be read: " + message,
                "pass the .model file spm_train wrote (not its .vocab), undamaged");
  }
  vocabulary_ = module_.piece_size(processor_);
  end_of_text_ = module_.eos_id(processor_);
  if (end_of_text_ < 0) {
    module_.free(processor_);
    processor_ = nullptr;
    throw Error(ErrorKind::Config,
                "sentencepiece model '" + model_path +
                    "' has no end-of-sentence id, which bigbatch puts between documents",
                "train it with an eos id (spm_train's default --eos_id=2)");
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() {
  if (processor_)
    module_.free(processor_);
}

void SentencePieceTokenizer::encode(std::string_view text, std::vector<int32_t>& ids,
                                    std::vector<int32_t>& bytes) const {
  if (const auto bad = first_invalid_utf8(text)) {
    throw Error(ErrorKind::Data,
                "is not UTF-8 (an invalid byte at offset " + std::to_string(*bad) +
                    "), which SentencePiece reads",
                "convert the corpus to UTF-8 (iconv), or use --tokenizer byte, which takes "
                "bytes as they are");
  }
  struct Sink {
    std::vector<int32_t>& ids;
    std::vector<int32_t>& bytes;
  } sink{ids, bytes};
  const int status = module_.encode(
      processor_, text.data(), text.size(),
      [](void* context, int id, int count) {
        auto& s = *static_cast<Sink*>(context);
        s.ids.push_back(id);
        s.bytes.push_back(count);
      },
      &sink);
  if (status != 0) {
    throw Error(ErrorKind::Data, "could not be encoded by sentencepiece model '" + path_ + "'",
                "check the model file, or use --tokenizer byte");
  }
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  const std::vector<int> pieces(ids.begin(), ids.end());
  const int status = module_.decode(
      processor_, pieces.data(), pieces.size(),
      [](void* context, const char* data, size_t size) {
        static_cast<std::string*>(context)->assign(data, size);
      },
      &text);
  if (status != 0) {
    throw Error(ErrorKind::Data, "sentencepiece model '" + path_ + "' could not decode ids",
                "check the model file: it is not the one these ids came from");
  }
  return text;
}

std::string SentencePieceTokenizer::describe() const {
  return "sentencepiece tokenizer '" + path_ + "' (vocabulary " + std::to_string(vocabulary_) +
         ", end-of-text " + std::to_string(end_of_text_) + ")";
}

}  // namespace bigbatch
