// CRC-32C (Castagnoli; polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum of iSCSI
// (RFC 3720), ext4 and SCTP: what guards every message on the wire (comm/group.h) and every
// checkpoint file (train/checkpoint.h). It detects every burst error up to 32 bits and
// every odd number of flipped bits.
//
// crc32c(b, crc32c(a)) == crc32c(a followed by b), so a checksum can be built piecewise.
// Four kernels give the same value (a unit test checks); crc32c() takes the fastest the CPU
// has: folding by carry-less multiplication (x86-64 with AVX-512 and VPCLMULQDQ: 2-3x the
// CRC32 instruction, crc32c_fold.h; or with AVX2 and VPCLMULQDQ, 256 bits at a time), three
// interleaved streams of the CRC32 instruction (SSE4.2: about 8 bytes a cycle), or tables
// (about 1 byte a cycle).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtrain {

// Slowest first; a CPU that has one has every one before it.
enum class Crc32cKernel { kTables, kCrc32Instruction, kCarrylessFold256, kCarrylessFold };

// The fastest kernel this CPU has: the one crc32c() and crc32c_copy() use.
Crc32cKernel crc32c_kernel();
// Every kernel this CPU has, slowest first (the tables are always there).
std::vector<Crc32cKernel> crc32c_kernels();
// Throws std::invalid_argument naming `kernel` where this CPU does not have it.
void require_crc32c_kernel(Crc32cKernel kernel);
const char* to_string(Crc32cKernel kernel);

uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// Copies `size` bytes from `data` to `out` (which must not overlap) and returns their
// crc32c(), in one pass over the bytes: a checksummed copy for about the cost of the
// checksum alone.
uint32_t crc32c_copy(void* out, const void* data, size_t size, uint32_t crc = 0);

// The CRC-32C of A followed by B, from crc32c(A), crc32c(B) and B's size (zlib's
// crc32_combine): for checksums computed in independent pieces, as kernels that touch the
// bytes anyway do (comm/fused_reduce.h). O(log size).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t size_b);

// crc32c() and crc32c_copy() by a given kernel, for tests and benchmarks: `kernel` must be
// at most crc32c_kernel() (std::invalid_argument otherwise).
uint32_t crc32c_with(Crc32cKernel kernel, const void* data, size_t size, uint32_t crc = 0);
uint32_t crc32c_copy_with(Crc32cKernel kernel, void* out, const void* data, size_t size,
                          uint32_t crc = 0);

}  // namespace dtrain
