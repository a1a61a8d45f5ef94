#include "data/tokenizer.h"

#include "core/error.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/text_corpus.h"

namespace bigbatch {

namespace {

class ByteTokenizer final : public TextTokenizer {
 public:
  int64_t vocabulary() const override { return kByteVocabulary; }
  int32_t end_of_text() const override { return kEndOfText; }
  void encode(std::string_view text, std::vector<int32_t>& ids,
              std::vector<int32_t>& bytes) const override {
    for (unsigned char byte : text) {
      ids.push_back(byte);
      bytes.push_back(1);
    }
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (int32_t id : ids) {
      if (id >= 0 && id < 256)
        text.push_back(static_cast<char>(id));
    }
    return text;
  }
  std::string describe() const override {
    return "byte tokenizer (vocabulary " + std::to_string(kByteVocabulary) + ")";
  }
};

}  // namespace

const TextTokenizer& byte_tokenizer() {
  static const ByteTokenizer tokenizer;
  return tokenizer;
}

std::unique_ptr<TextTokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "byte")
    return std::make_unique<ByteTokenizer>();
  const std::string prefix = "sentencepiece:";
  if (spec.rfind(prefix, 0) == 0 && spec.size() > prefix.size())
    return std::make_unique<SentencePieceTokenizer>(spec.substr(prefix.size()));
  throw Error(ErrorKind::Config, "tokenizer '" + spec + "' is not known",
              "use --tokenizer byte or --tokenizer sentencepiece:FILE.model");
}

TokenDocuments tokenize_documents(const std::vector<std::string>& documents,
                                  const TextTokenizer& tokenizer, bool packed,
                                  const std::string& name) {
  TokenDocuments result;
  const int32_t eot = tokenizer.end_of_text();
  auto end_of_text = [&] {
    result.tokens.push_back(eot);
    result.bytes.push_back(0);
  };
  end_of_text();
  for (size_t d = 0; d < documents.size(); ++d) {
    try {
      tokenizer.encode(documents[d], result.tokens, result.bytes);
    } catch (const Error& e) {
      throw Error(e.kind(),
                  "document " + std::to_string(d + 1) + " of '" + name + "' " + e.problem(),
                  e.hint());
    }
    end_of_text();
    if (!packed) {
      result.close_document();
      end_of_text();  // the next document's first token
    }
  }
  if (packed) {
    result.close_document();
  } else {
    result.tokens.pop_back();
    result.bytes.pop_back();
  }
  return result;
}

}  // namespace bigbatch
