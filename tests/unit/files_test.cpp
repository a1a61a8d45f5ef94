#include "core/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

class OutputFileTest : public ::testing::Test {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("bigbatch_files_" + std::to_string(::getpid()));
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  static std::string message_of(const std::function<void()>& action) {
    try {
      action();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(OutputFileTest, WritingThroughALinkReplacesItsTargetAndKeepsTheLink) {
  std::ofstream(at("real.txt")) << "old";
  fs::create_symlink(at("real.txt"), at("link.txt"));
  check_output_file(at("link.txt"), "--output");
  atomic_write_file(at("link.txt"), "new");
  EXPECT_TRUE(fs::is_symlink(at("link.txt")));
  EXPECT_EQ(read_text_file(at("real.txt")), "new");
  // A link to a file not written yet: the file appears where the link points.
  fs::create_symlink(at("later.txt"), at("dangling.txt"));
  atomic_write_file(at("dangling.txt"), "made");
  EXPECT_TRUE(fs::is_symlink(at("dangling.txt")));
  EXPECT_EQ(read_text_file(at("later.txt")), "made");
}

TEST_F(OutputFileTest, ADevicePipeOrDirectoryIsNeverReplaced) {
  ASSERT_EQ(::mkfifo(at("pipe").c_str(), 0600), 0);
  const std::string pipe = message_of([&] { check_output_file(at("pipe"), "--output"); });
  EXPECT_NE(pipe.find("is a named pipe, not a regular file"), std::string::npos) << pipe;
  EXPECT_NE(message_of([&] { atomic_write_file(at("pipe"), "x"); }).find("named pipe"),
            std::string::npos);
  EXPECT_TRUE(fs::is_fifo(at("pipe")));
  const std::string device = message_of([] { check_output_file("/dev/null", "--output"); });
  EXPECT_NE(device.find("'/dev/null' is a character device"), std::string::npos) << device;
  fs::create_symlink("/dev/null", at("null_link"));
  EXPECT_NE(message_of([&] { atomic_write_file(at("null_link"), "x"); }).find("character device"),
            std::string::npos);
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  fs::create_directories(at("sub"));
  EXPECT_NE(
      message_of([&] { check_output_file(at("sub"), "--save-weights"); }).find("is a directory"),
      std::string::npos);
}

TEST_F(OutputFileTest, AnOutputThatIsAnInputIsRefusedUnderAnyName) {
  std::ofstream(at("x.npy")) << "input";
  fs::create_symlink(at("x.npy"), at("alias.npy"));
  const std::string same =
      message_of([&] { check_output_file(at("alias.npy"), "--output", {at("x.npy")}); });
  EXPECT_NE(same.find("is the input"), std::string::npos) << same;
  EXPECT_NE(message_of([&] { check_output_file(at("x.npy"), "--output", {at("x.npy")}); }), "");
  EXPECT_EQ(message_of([&] { check_output_file(at("y.npy"), "--output", {at("x.npy")}); }), "");
  EXPECT_EQ(read_text_file(at("x.npy")), "input");
}

TEST_F(OutputFileTest, AMissingDirectoryIsNamedWithTheLinkItCameThrough) {
  fs::create_symlink(at("nowhere/file"), at("link"));
  const std::string missing = message_of([&] { check_output_file(at("link"), "--output"); });
  EXPECT_NE(missing.find("(a link to '"), std::string::npos) << missing;
  EXPECT_NE(missing.find("does not exist"), std::string::npos) << missing;
}

}  // namespace
}  // namespace bigbatch
