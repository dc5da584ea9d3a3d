// The tensor-operation coding (what a GPU runs) against the CPU kernels, byte for byte, on
// CPU tensors: the same ATen operations run on CUDA in tests/gpu.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "dtrain/compress/codec.h"
#include "dtrain/compress/tensor_coding.h"

namespace dtrain::compress {
namespace {

at::Tensor sample(const std::string& dist, int64_t n) {
  at::manual_seed(11);
  if (dist == "gaussian") return at::randn({n});
  if (dist == "relu") return at::relu(at::randn({n}));
  if (dist == "ties") return at::randint(-2, 3, {n}).to(at::kFloat) * 0.25f;
  if (dist == "heavy") return at::randn({n}) / (at::rand({n}) + 1e-3);
  if (dist == "constant") return at::full({n}, 1.5f);
  if (dist == "signed-zeros") {  // -0 and +0 both present: their order must match the CPU's
    at::Tensor x = at::relu(at::randn({n}));
    x.narrow(0, 0, n / 2).mul_(-1.f);
    return x;
  }
  if (dist == "tiny") return at::randn({n}) * 1e-38f;  // denormals among the values
  throw std::invalid_argument(dist);
}

struct Parts {
  std::vector<uint8_t> table, payload;
};

Parts cpu_kernels(const Codec& codec, const at::Tensor& x) {
  const int64_t n = x.numel();
  Parts p{std::vector<uint8_t>(codec.table_bytes(n)), std::vector<uint8_t>(codec.payload_bytes(n))};
  codec.encode_values(x.data_ptr<float>(), n, p.table.data(), p.payload.data(), 1);
  return p;
}

Parts tensor_ops(const Codec& codec, const at::Tensor& x) {
  const int64_t n = x.numel();
  Parts p{std::vector<uint8_t>(codec.table_bytes(n), 0xAB),
          std::vector<uint8_t>(codec.payload_bytes(n), 0xAB)};
  encode_with_tensor_ops(codec, x, p.table.data(), p.payload.data());
  return p;
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data_ptr<float>(), b.data_ptr<float>(),
                                               static_cast<size_t>(a.numel()) * 4) == 0;
}

TEST(TensorCodingTest, PacketsAndValuesAreTheCpuKernelsBitForBit) {
  const std::vector<std::string> codecs = {"none",
                                           "fp16",
                                           "bf16",
                                           "uniform:1",
                                           "uniform:3",
                                           "uniform:4",
                                           "uniform:7",
                                           "uniform:8",
                                           "uniform:9",
                                           "uniform:13",
                                           "uniform:16",
                                           "sortquant:4",
                                           "sortquant:8",
                                           "sortquant:12",
                                           "sortquant:16",
                                           "sortquant:2:6",
                                           "sortquant:5:1",
                                           "rot:uniform:4",
                                           "rot:8:uniform:2",
                                           "rot:16:sortquant:4",
                                           "rot:4096:uniform:3",
                                           "tile:1",
                                           "tile:2",
                                           "tile:4",
                                           "tile:8",
                                           "rot:tile:2",
                                           "rot:64:tile:3"};
  for (const std::string dist :
       {"gaussian", "relu", "ties", "heavy", "constant", "signed-zeros", "tiny"}) {
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{4099}}) {
      const at::Tensor x = sample(dist, n);
      for (const std::string& name : codecs) {
        SCOPED_TRACE(name + " on " + std::to_string(n) + " " + dist + " values");
        const auto codec = make_codec(name);
        const Parts want = cpu_kernels(*codec, x);
        const Parts got = tensor_ops(*codec, x);
        ASSERT_EQ(got.table, want.table);
        ASSERT_EQ(got.payload, want.payload);

        at::Tensor decoded = at::empty({n}, at::kFloat);
        codec->decode_values(want.table.data(), want.payload.data(), n, decoded.data_ptr<float>(),
                             1);
        const at::Tensor by_ops =
            decode_with_tensor_ops(*codec, want.table.data(), want.payload.data(), n, at::kCPU);
        EXPECT_TRUE(same_bits(by_ops, decoded));
      }
    }
  }
}

TEST(TensorCodingTest, ThePacketPathsAgreeAndDecodeOnTheAskedDevice) {
  const at::Tensor x = sample("gaussian", 3000).reshape({3, 10, 100}).to(at::kDouble);
  for (const std::string name :
       {"sortquant:8", "uniform:6", "fp16", "kmeans:3:20", "rot:kmeans:3:20", "rot:uniform:3"}) {
    SCOPED_TRACE(name);
    const Packet packet = encode(*make_codec(name), x);
    const at::Tensor on_cpu = decode(packet);
    const at::Tensor by_ops = decode(packet.data(), packet.size(), 1, at::kCPU);
    EXPECT_EQ(on_cpu.sizes(), x.sizes());
    EXPECT_EQ(on_cpu.scalar_type(), at::kDouble);
    EXPECT_TRUE(at::equal(by_ops, on_cpu));
    // kmeans encodes on the CPU only, but decodes like the others (a gather).
    const auto codec = make_codec(name);
    const PacketInfo info = inspect(packet.data(), packet.size());
    const uint8_t* table = packet.data() + info.header_bytes;
    EXPECT_TRUE(at::equal(
        decode_with_tensor_ops(*codec, table, table + info.table_bytes, info.numel, at::kCPU),
        on_cpu.to(at::kFloat).reshape({-1})));
  }
}

TEST(TensorCodingTest, EmptyTensorsNonFiniteValuesAndBadTablesAreHandledAsOnTheCpu) {
  const at::Tensor empty = at::empty({0}, at::kFloat);
  for (const std::string name : {"none", "uniform:8", "sortquant:8"}) {
    const auto codec = make_codec(name);
    const Parts parts = tensor_ops(*codec, empty);
    EXPECT_EQ(parts.table, cpu_kernels(*codec, empty).table) << name;
    EXPECT_EQ(decode_with_tensor_ops(*codec, parts.table.data(), parts.payload.data(), 0, at::kCPU)
                  .numel(),
              0);
  }
  for (const float bad : {std::nanf(""), -std::nanf(""), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    at::Tensor x = sample("gaussian", 100);
    x[37] = bad;
    for (const std::string name : {"none", "bf16", "uniform:8", "sortquant:8", "sortquant:2:6",
                                   "rot:uniform:4", "tile:3", "rot:tile:3"}) {
      try {
        tensor_ops(*make_codec(name), x);
        ADD_FAILURE() << name << " took " << bad;
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("NaN or Inf"), std::string::npos) << e.what();
      }
    }
  }
  const auto kmeans = make_codec("kmeans:4");
  EXPECT_THROW(tensor_ops(*kmeans, sample("gaussian", 10)), std::invalid_argument);
  EXPECT_THROW(tensor_ops(*make_codec("uniform:8"), sample("gaussian", 10).to(at::kDouble)),
               std::invalid_argument);

  const auto uniform = make_codec("uniform:8");
  const float bad_table[2] = {0.f, -1.f};  // a negative step
  uint8_t payload[4] = {};
  EXPECT_THROW(decode_with_tensor_ops(*uniform, reinterpret_cast<const uint8_t*>(bad_table),
                                      payload, 4, at::kCPU),
               CorruptPacket);
}

}  // namespace
}  // namespace dtrain::compress
