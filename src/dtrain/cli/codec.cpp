// `dtrain codec encode|decode|inspect`: one tensor <-> one packet file, with the codecs the
// wire uses. Tensors are raw little-endian values (numpy's tofile()); packets are the wire's
// bytes (docs/wire-format.md). For scripts, tests (the Python package's packets are checked
// against these) and looking at what a codec made.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/compress/codec.h"

namespace dtrain::cli {
namespace {

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string describe(const compress::PacketInfo& info, size_t packet_bytes) {
  std::ostringstream s;
  s << "codec " << compress::to_string(info.spec) << ", " << c10::toString(info.dtype)
    << ", shape [";
  for (size_t i = 0; i < info.shape.size(); ++i)
    s << (i ? "," : "") << info.shape[i];
  s << "], " << info.numel << " values, " << packet_bytes << " bytes (header " << info.header_bytes
    << ", table " << info.table_bytes << ", payload " << info.payload_bytes << "), ratio "
    << compress::compression_ratio(packet_bytes, info.numel);
  return s.str();
}

struct EncodeArgs {
  std::string codec = "sortquant:8", shape, dtype = "float32", in, out;
  int threads = 1;
};

struct DecodeArgs {
  std::string in, out;
  int threads = 1;
};

void add_threads_option(CLI::App* sub, int& threads) {
  sub->add_option("--threads", threads,
                  "threads for coding (tensors of 1M values and more; same bytes for any count)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

void encode_file(const EncodeArgs& a) {
  std::vector<int64_t> shape;
  for (const int d : parse_int_list(a.shape, "--shape"))
    shape.push_back(d);
  const auto codec = compress::make_codec(a.codec);
  std::vector<uint8_t> raw = read_file(a.in);
  const at::ScalarType dtype = parse_dtype(a.dtype);
  if (!at::isFloatingType(dtype))
    throw std::invalid_argument("--dtype " + a.dtype + ": float32, float64, float16 or bfloat16");
  int64_t numel = 1;
  for (const int64_t d : shape)
    numel *= d;
  const size_t expected = static_cast<size_t>(numel) * c10::elementSize(dtype);
  if (raw.size() != expected) {
    throw std::invalid_argument(a.in + " holds " + std::to_string(raw.size()) + " bytes; shape " +
                                a.shape + " of " + a.dtype + " needs " + std::to_string(expected));
  }
  // The file's bytes, coded in place (raw outlives the tensor).
  const at::Tensor tensor = at::from_blob(raw.data(), shape, at::TensorOptions().dtype(dtype));
  const compress::Packet packet = compress::encode(*codec, tensor, a.threads);
  write_file(a.out, packet.data(), packet.size());
  std::cout << describe(compress::inspect(packet.data(), packet.size()), packet.size()) << "\n";
}

void decode_file(const DecodeArgs& a) {
  const std::vector<uint8_t> packet = read_file(a.in);
  const at::Tensor tensor = compress::decode(packet, a.threads).contiguous();
  write_file(a.out, tensor.data_ptr(), static_cast<size_t>(tensor.nbytes()));
  std::cout << describe(compress::inspect(packet.data(), packet.size()), packet.size()) << "\n";
}

}  // namespace

void register_codec(CLI::App& parent, int& exit_code) {
  CLI::App* codec = parent.add_subcommand(
      "codec", "code one tensor file into a packet file and back, or show a packet's header");
  codec->require_subcommand(1);

  auto enc = std::make_shared<EncodeArgs>();
  CLI::App* encode = codec->add_subcommand(
      "encode", "raw little-endian values (numpy tofile) -> a packet (the wire's bytes)");
  encode->add_option("--codec", enc->codec, compress::codec_help())->capture_default_str();
  encode->add_option("--shape", enc->shape, "the tensor's shape, e.g. 32,128,768")->required();
  encode->add_option("--dtype", enc->dtype, "float32 | float64 | float16 | bfloat16")
      ->capture_default_str();
  encode->add_option("input", enc->in, "raw tensor file")->required();
  encode->add_option("output", enc->out, "packet file to write")->required();
  add_threads_option(encode, enc->threads);
  encode->callback([enc, &exit_code] {
    encode_file(*enc);
    exit_code = 0;
  });

  auto dec = std::make_shared<DecodeArgs>();
  CLI::App* decode = codec->add_subcommand(
      "decode", "a packet -> raw little-endian values in the packet's dtype (shape printed)");
  decode->add_option("input", dec->in, "packet file")->required();
  decode->add_option("output", dec->out, "raw tensor file to write")->required();
  add_threads_option(decode, dec->threads);
  decode->callback([dec, &exit_code] {
    decode_file(*dec);
    exit_code = 0;
  });

  auto packet_path = std::make_shared<std::string>();
  CLI::App* inspect = codec->add_subcommand("inspect", "check a packet and print its header");
  inspect->add_option("packet", *packet_path, "packet file")->required();
  inspect->callback([packet_path, &exit_code] {
    const std::vector<uint8_t> packet = read_file(*packet_path);
    std::cout << describe(compress::inspect(packet.data(), packet.size()), packet.size()) << "\n";
    exit_code = 0;
  });
}

}  // namespace dtrain::cli
