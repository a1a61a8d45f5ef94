#pragma once
// numpy's .npz archives (numpy.savez, numpy.savez_compressed): a zip file whose members are
// .npy files, stored or deflated. The zip container is read with zlib's minizip, over the bytes
// in memory; each member is then an .npy file (data/npy_format.h) and checked as one. A damaged
// or hostile archive — not a zip, a member that is not .npy, encrypted, of another compression,
// failing its CRC, or inflating past the limit — is a bigbatch::Error (Data) naming the archive
// and the member, never a crash or an allocation sized by a header alone.
//
//   NpzArchive arrays = read_npz_file("data.npz");
//   const NpyArray* x = arrays.find("x_train");   // the member x_train.npy; null when absent
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/npy_format.h"

namespace bigbatch {

struct NpzArchive {
  std::vector<std::pair<std::string, NpyArray>> arrays;  // member names without ".npy"
  const NpyArray* find(const std::string& name) const;
};

// What the archive's members may inflate to, together: more is refused before it is
// allocated (a zip bomb, or a size field that lies).
inline constexpr uint64_t kMaxNpzMemberBytes = uint64_t{64} << 30;

// Parses a whole .npz file held in memory; `name` appears in error messages.
NpzArchive parse_npz(const std::string& bytes, const std::string& name,
                     uint64_t max_member_bytes = kMaxNpzMemberBytes);

NpzArchive read_npz_file(const std::string& path);

}  // namespace bigbatch
