// CRC-32C (Castagnoli; polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum of iSCSI
// (RFC 3720), ext4 and SCTP: what guards every message on the wire (comm/group.h) and every
// checkpoint file (train/checkpoint.h). It detects every burst error up to 32 bits and
// every odd number of flipped bits.
//
// crc32c(b, crc32c(a)) == crc32c(a followed by b), so a checksum can be built piecewise.
// x86-64 CPUs with SSE4.2 take three interleaved hardware streams (about 8 bytes a cycle);
// others use tables (about 1 byte a cycle). Both give the same value (a unit test checks).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dtrain {

uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// Copies `size` bytes from `data` to `out` (which must not overlap) and returns their
// crc32c(), in one pass over the bytes: a checksummed copy for about the cost of the
// checksum alone.
uint32_t crc32c_copy(void* out, const void* data, size_t size, uint32_t crc = 0);

// The CRC-32C of A followed by B, from crc32c(A), crc32c(B) and B's size (zlib's
// crc32_combine): for checksums computed in independent pieces, as kernels that touch the
// bytes anyway do (comm/fused_reduce.h). O(log size).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t size_b);

// The portable table version, whatever the CPU (for tests and benchmarks).
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);

// Whether crc32c() uses the CPU's CRC32 instruction.
bool crc32c_hardware();

}  // namespace dtrain
