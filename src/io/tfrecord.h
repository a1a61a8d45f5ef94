#pragma once
// The TFRecord container, as TensorBoard's event files use it: each record is its length
// (uint64, little-endian), the masked CRC-32C of those 8 bytes, the data, and the masked
// CRC-32C of the data. Readers check both checksums and stop at a record cut short, so a file
// that a killed writer left mid-record still reads up to its last whole record. Torch-free.
//
//   file.append(tfrecord_frame(event_bytes));
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace bigbatch {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum TFRecord uses; "123456789"
// gives 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// The checksum as TFRecord stores it: rotated right by 15 bits plus 0xa282ead8, so that a CRC
// of bytes holding CRCs does not degenerate.
uint32_t masked_crc32c(const void* data, size_t size);
// `data` as one TFRecord record.
std::string tfrecord_frame(std::string_view data);

}  // namespace bigbatch
