#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/text.h"
#include "data/text_corpus.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

using Documents = std::vector<std::string>;

TEST(SplitDocuments, FortuneFormatCutsOnPercentLines) {
  EXPECT_EQ(split_documents("one\ntwo\n%\nthree\n%\n", "%"), (Documents{"one\ntwo\n", "three\n"}));
  // A "%" inside a line is text; CRLF separators count; whitespace-only documents are dropped.
  EXPECT_EQ(split_documents("50% off\r\n%\r\n\n  \n%\nlast", "%"),
            (Documents{"50% off\r\n", "last"}));
}

TEST(SplitDocuments, BlankLinesOneDocumentPerLineOrALiteralSeparator) {
  EXPECT_EQ(split_documents("a\nb\n\nc\n", "blank"), (Documents{"a\nb\n", "c\n"}));
  EXPECT_EQ(split_documents("a\n\nb\nc", "line"), (Documents{"a", "b", "c"}));
  EXPECT_EQ(split_documents("x\n---\ny\n", "---"), (Documents{"x\n", "y\n"}));
  int64_t separators = -1;
  EXPECT_EQ(split_documents("no separator here\n", "%", &separators),
            (Documents{"no separator here\n"}));
  EXPECT_EQ(separators, 0);
}

class TextCorpusFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bigbatch-corpus-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  std::string error_of(const std::string& path, const std::string& separator) {
    try {
      read_text_corpus(path, separator);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(TextCorpusFiles, ADirectoryReadsItsTextFilesOnceInNameOrder) {
  write("b", "two\n%\nthree\n");
  write("a", "one\n%\n");
  write("a.dat", std::string("\0\0\x01\x02", 4));  // fortune's strfile index: binary
  fs::create_symlink(dir_ / "a", dir_ / "a.u8");   // the same file again
  const TextCorpus corpus = read_text_corpus(dir_.string(), "%");
  EXPECT_EQ(corpus.documents, (Documents{"one\n", "two\n", "three\n"}));
  EXPECT_EQ(corpus.files, 2);
  EXPECT_EQ(corpus.skipped_files, 2);
  EXPECT_EQ(corpus.bytes, 4 + 4 + 6);
}

TEST_F(TextCorpusFiles, BadCorporaAreOneClearError) {
  EXPECT_NE(error_of((dir_ / "missing").string(), "%").find("does not exist"), std::string::npos);
  EXPECT_NE(error_of(dir_.string(), "%").find("holds no text files"), std::string::npos);
  write("blank", "  \n\n");
  EXPECT_NE(error_of((dir_ / "blank").string(), "%").find("holds no text"), std::string::npos);
  write("one", "a long text without the separator\n");
  const std::string message = error_of((dir_ / "one").string(), "%");
  EXPECT_NE(message.find("never has a separator line '%'"), std::string::npos) << message;
  EXPECT_NE(message.find("--doc-separator"), std::string::npos);
}

TEST(JsonlCorpus, ReadsTheFieldOfEveryObjectAndNamesTheBadLine) {
  const TextCorpus corpus = parse_jsonl_corpus(
      "{\"text\": \"one\", \"id\": 1}\n\n{\"text\": \"two \\u00e9\"}\n", "text", "c.jsonl");
  EXPECT_EQ(corpus.documents, (Documents{"one", "two \xc3\xa9"}));
  const auto error_of = [](const std::string& text) {
    try {
      parse_jsonl_corpus(text, "text", "c.jsonl");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("{\"text\": \"a\"}\nnot json\n").find("line 2 of 'c.jsonl' is not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of("[1, 2]\n").find("is not a JSON object (it is an array)"), std::string::npos);
  // Issue 36: what is wrong is said, not "not a JSON object".
  const std::string surrogate = error_of("{\"text\": \"a \\ud800 b\"}\n");
  EXPECT_NE(surrogate.find("is not valid JSON at byte"), std::string::npos) << surrogate;
  EXPECT_NE(surrogate.find("surrogate"), std::string::npos) << surrogate;
  const std::string overflow = error_of("{\"text\": \"a\", \"n\": 1e999}\n");
  EXPECT_NE(overflow.find("1e999"), std::string::npos) << overflow;
  const std::string latin1 = error_of("{\"text\": \"caf\xe9\"}\n");
  EXPECT_NE(latin1.find("UTF-8"), std::string::npos) << latin1;
  EXPECT_NE(latin1.find("iconv"), std::string::npos) << latin1;
  EXPECT_EQ(latin1.find('\xe9'), std::string::npos) << latin1;  // the line's bytes are not echoed
  EXPECT_NE(error_of("{\"body\": \"a\"}\n").find("line 1 of 'c.jsonl' has no field \"text\""),
            std::string::npos);
  EXPECT_NE(error_of("{\"text\": 3}\n").find("is not a string"), std::string::npos);
  EXPECT_NE(error_of("\n\n").find("holds no documents"), std::string::npos);
}

TEST(TokenRowsErrors, SeqLenBelowTwoIsRefused) {
  EXPECT_THROW(document_rows({"abc"}, 1), Error);
  EXPECT_THROW(packed_rows({"abc"}, 0), Error);
}

}  // namespace
}  // namespace bigbatch

namespace bigbatch {
namespace {

TEST(Utf8, FirstInvalidByteByRfc3629) {
  EXPECT_FALSE(first_invalid_utf8("plain ascii"));
  EXPECT_FALSE(first_invalid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_EQ(first_invalid_utf8("caf\xe9!"), 3u);                                  // Latin-1 é
  EXPECT_EQ(first_invalid_utf8("a\xc0\xafz"), 1u);                                // overlong '/'
  EXPECT_EQ(first_invalid_utf8("ab\xed\xa0\x80"), 2u);                            // a surrogate
  EXPECT_EQ(first_invalid_utf8("\xf4\x90\x80\x80"), 0u);                          // past U+10FFFF
  EXPECT_EQ(first_invalid_utf8("ok\xe2\x82"), 2u);                                // cut short
  EXPECT_EQ(first_invalid_utf8("x\x80"), 1u);  // a lone continuation
}

}  // namespace
}  // namespace bigbatch
