// The base helpers: the strict integer parser, the enum name tables every flag goes through,
// and the checksums (CRC-32C on the wire and in checkpoints, SHA-256 in the rendezvous).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <random>
#include <vector>

#include "dtrain/base/crc32c.h"
#include "dtrain/base/names.h"
#include "dtrain/base/parse.h"
#include "dtrain/base/sha256.h"

namespace dtrain {
namespace {

TEST(ParseIntegerTest, WholeTextWithinBoundsOnly) {
  EXPECT_EQ(parse_integer("42", 0, 100), 42);
  EXPECT_EQ(parse_integer("-3", -5, 5), -3);
  EXPECT_EQ(parse_integer("0", 0, 0), 0);
  for (const char* bad : {"", " 4", "4 ", "+4", "4x", "x", "0x10", "1e3", "4.0", "--4"})
    EXPECT_FALSE(parse_integer(bad, -1000, 1000)) << "'" << bad << "'";
  EXPECT_FALSE(parse_integer("101", 0, 100));
  EXPECT_FALSE(parse_integer("-1", 0, 100));
  EXPECT_FALSE(parse_integer("99999999999999999999999", 0, INT64_MAX));
}

TEST(CountInDoubleTest, WholeNonNegativeAndExactOnly) {
  EXPECT_EQ(count_in_double(0.0), 0);
  EXPECT_EQ(count_in_double(17.0), 17);
  EXPECT_EQ(count_in_double(8.9e15), int64_t{8'900'000'000'000'000});
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (const double bad : {-1.0, 0.5, 9.0e15, 1e300, nan, inf, -inf})
    EXPECT_FALSE(count_in_double(bad)) << bad;
}

enum class Colour { kRed, kGreen, kBlue };

TEST(EnumNamesTest, ParseAndPrintReadOneTable) {
  const EnumNames<Colour> names(
      "colour", {{Colour::kRed, "red"}, {Colour::kGreen, "green"}, {Colour::kBlue, "blue"}});
  for (const Colour c : {Colour::kRed, Colour::kGreen, Colour::kBlue})
    EXPECT_EQ(names.parse(names.to_string(c)), c);
  EXPECT_EQ(names.choices(), "red, green or blue");
  try {
    names.parse("purple");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown colour 'purple' (red, green or blue)");
  }
}

}  // namespace
}  // namespace dtrain

namespace dtrain {
namespace {

// RFC 3720 (iSCSI) appendix B.4 and the common "123456789" check value.
TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::vector<uint8_t> ascending(32);
  for (size_t i = 0; i < ascending.size(); ++i)
    ascending[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

// Every kernel this CPU has against the tables, at lengths around the CRC32 instruction's
// 3 x 4 KiB rounds and the fold's 256-byte rounds, from several starting registers (a CRC
// built piecewise) and offsets (unaligned data), plain and copying.
TEST(Crc32cTest, EveryKernelAndPiecesAgreeWithTheTables) {
  std::mt19937 gen(7);
  std::vector<uint8_t> data(3 * 12288 + 77);
  for (auto& b : data)
    b = static_cast<uint8_t>(gen());
  const std::vector<Crc32cKernel> kernels = crc32c_kernels();
  // Every kernel up to the one crc32c() takes, the tables first: none left untested.
  ASSERT_EQ(kernels.size(), static_cast<size_t>(crc32c_kernel()) + 1);
  for (size_t i = 0; i < kernels.size(); ++i)
    EXPECT_EQ(static_cast<size_t>(kernels[i]), i);
  const auto tables = [&](size_t begin, size_t n, uint32_t crc = 0) {
    return crc32c_with(Crc32cKernel::kTables, data.data() + begin, n, crc);
  };
  for (const Crc32cKernel kernel : kernels) {
    for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{255}, size_t{256},
                           size_t{257}, size_t{511}, size_t{512}, size_t{1000}, size_t{12287},
                           size_t{12288}, size_t{12289}, size_t{24576 + 5}, data.size() - 3}) {
      for (const size_t offset : {size_t{0}, size_t{3}}) {
        const size_t len = std::min(n, data.size() - offset);
        SCOPED_TRACE(std::string(to_string(kernel)) + " n " + std::to_string(len) + " offset " +
                     std::to_string(offset));
        const uint32_t whole = tables(offset, len);
        EXPECT_EQ(crc32c_with(kernel, data.data() + offset, len), whole);
        const size_t cut = len / 3;
        const uint32_t head = tables(offset, cut);
        EXPECT_EQ(crc32c_with(kernel, data.data() + offset + cut, len - cut, head), whole);
        // The checksummed copy: the same value, every byte copied and none past the end.
        std::vector<uint8_t> copy(len + 8, 0xA5);
        EXPECT_EQ(crc32c_copy_with(kernel, copy.data(), data.data() + offset, len), whole);
        EXPECT_TRUE(std::equal(copy.begin(), copy.begin() + static_cast<long>(len),
                               data.begin() + static_cast<long>(offset)));
        EXPECT_EQ(copy[len], 0xA5);
        EXPECT_EQ(
            crc32c_copy_with(kernel, copy.data(), data.data() + offset + cut, len - cut, head),
            whole);
      }
    }
  }
  EXPECT_EQ(crc32c(data.data(), data.size()), tables(0, data.size()));
  // A kernel this CPU lacks is refused, not run.
  if (crc32c_kernel() != Crc32cKernel::kCarrylessFold) {
    EXPECT_THROW(crc32c_with(Crc32cKernel::kCarrylessFold, data.data(), 1), std::invalid_argument);
  }
  // Any single flipped bit changes it.
  const uint32_t before = crc32c(data.data(), data.size());
  data[12345] ^= 0x04;
  EXPECT_NE(crc32c(data.data(), data.size()), before);
}

// Joined from independent pieces, the checksum of the whole, for any cut (empty parts too).
TEST(Crc32cTest, CombineJoinsPiecesChecksummedApart) {
  std::mt19937 gen(9);
  std::vector<uint8_t> data(100003);
  for (auto& b : data)
    b = static_cast<uint8_t>(gen());
  for (const size_t cut : {size_t{0}, size_t{1}, size_t{8}, size_t{4096}, size_t{50000},
                           data.size() - 1, data.size()}) {
    const uint32_t a = crc32c(data.data(), cut);
    const uint32_t b = crc32c(data.data() + cut, data.size() - cut);
    EXPECT_EQ(crc32c_combine(a, b, data.size() - cut), crc32c(data.data(), data.size())) << cut;
  }
}

// FIPS 180-4 examples.
TEST(Sha256Test, KnownValues) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000, 'a')),
            "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

}  // namespace
}  // namespace dtrain
