#include "data/npz_format.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/files.h"
#include "io/zip_archive.h"

namespace bigbatch {

namespace {

[[noreturn]] void bad_archive(const std::string& name, const std::string& what,
                              const std::string& hint) {
  throw Error(ErrorKind::Data, ".npz archive '" + name + "' " + what, hint);
}

}  // namespace

const NpyArray* NpzArchive::find(const std::string& name) const {
  for (const auto& [key, array] : arrays) {
    if (key == name)
      return &array;
  }
  return nullptr;
}

NpzArchive parse_npz(const std::string& bytes, const std::string& name, uint64_t max_member_bytes) {
  NpzArchive out;
  try {
    ZipReader archive(bytes);
    uint64_t inflated = 0;
    while (archive.next()) {
      const std::string& member = archive.member();
      const std::string suffix = ".npy";
      if (member.size() <= suffix.size() ||
          member.compare(member.size() - suffix.size(), suffix.size(), suffix) != 0) {
        bad_archive(name, "holds '" + member + "', which is not an .npy array",
                    "an .npz holds numpy arrays only: numpy.savez(PATH, x_train=x, ...)");
      }
      const std::string key = member.substr(0, member.size() - suffix.size());
      if (out.find(key) != nullptr)
        bad_archive(name, "holds '" + member + "' twice", "save the archive again");
      // The whole archive's inflated bytes are bounded too: members may share one deflate
      // stream (a zip bomb needs no recursion).
      if (archive.inflated_size() > max_member_bytes - std::min(inflated, max_member_bytes)) {
        bad_archive(
            name,
            "would inflate to more than " + std::to_string(max_member_bytes) + " bytes in all",
            "split the data over smaller archives");
      }
      const std::string data = archive.read(max_member_bytes);
      inflated += data.size();
      out.arrays.emplace_back(key, parse_npy(reinterpret_cast<const uint8_t*>(data.data()),
                                             data.size(), name + ":" + member));
    }
  } catch (const ZipError& e) {
    // numpy writes plain zips: a zip it cannot have written is best saved again by numpy.
    const std::string what = e.what();
    const bool not_zip = what.rfind("is not a zip archive", 0) == 0;
    bad_archive(name, what,
                not_zip ? "save it with numpy.savez(PATH, x_train=x, y_train=y)" : e.hint);
  }
  return out;
}

NpzArchive read_npz_file(const std::string& path) {
  if (!path_exists(path)) {
    throw Error(ErrorKind::Data, ".npz archive '" + path + "' does not exist",
                "check the path given to --dataset npy:FILE.npz");
  }
  return parse_npz(read_text_file(path), path);
}

}  // namespace bigbatch
