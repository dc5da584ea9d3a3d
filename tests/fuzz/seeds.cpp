// Writes the seed corpus of every fuzz target under DIR/<target>/ (valid inputs made by
// dtrain's own writers, plus a few near misses): `fuzz_seeds tests/fuzz/corpus`. The corpus
// kept in the repository started from these and grew by fuzzing (tests/fuzz/README.md).
#include <ATen/ATen.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "dtrain/base/crc32c.h"
#include "dtrain/compress/codec.h"
#include "dtrain/models/safetensors.h"
#include "dtrain/parallel/pipeline/command.h"
#include "dtrain/train/checkpoint.h"
#include "targets/fuzz_support.h"
#include "targets/tiny_state.h"

namespace {

std::string root;

std::string read_back(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  std::string bytes;
  char buffer[4096];
  for (size_t got; f && (got = std::fread(buffer, 1, sizeof buffer, f.get())) > 0;)
    bytes.append(buffer, got);
  return bytes;
}

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = root + "/" + target;
  mkdir(root.c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen((dir + "/" + name).c_str(), "wb"),
                                          &std::fclose);
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size())
    throw std::runtime_error("cannot write " + dir + "/" + name);
}

std::string bytes_of(const void* p, size_t n) {
  return {static_cast<const char*>(p), n};
}

void codec_packets() {
  int k = 0;
  for (const char* name : {"none", "fp16", "bf16", "uniform:5", "uniform:16", "sortquant:8",
                           "sortquant:3:3", "kmeans:3", "kmeans:8:3", "rot:uniform:3",
                           "rot:16:sortquant:4", "rot:8:kmeans:2", "tile:3", "rot:tile:2"}) {
    const auto codec = dtrain::compress::make_codec(name);
    for (const auto& shape : std::vector<std::vector<int64_t>>{{0}, {7, 3}, {2, 2, 5}}) {
      for (const auto dtype : {at::kFloat, at::kHalf}) {
        const auto packet = dtrain::compress::encode(*codec, at::randn(shape).to(dtype));
        seed("codec_packet", "seed-" + std::to_string(k++), bytes_of(packet.data(), packet.size()));
      }
    }
  }
}

void checkpoints() {
  dtrain::fuzz::TinyState state;
  state.module->train();
  const auto loss = state.module->forward(at::randn({4, 3})).square().sum();
  loss.backward();
  state.optimizer.step();  // so the optimizer has momentum buffers to save
  const std::string dir = dtrain::fuzz::scratch_dir() + "/checkpoint";
  dtrain::train::Manifest manifest;
  manifest.layout = "pipeline world=2 stages=1|1";
  manifest.parameters = 12;
  for (int rank = 0; rank < 2; ++rank) {
    const dtrain::train::Position at{1, 3 * rank, 0.5, 7, 12};
    manifest.shards.push_back(
        dtrain::train::write_shard(dir, rank, at, {state.module, state.optimizer}));
    seed("checkpoint_shard", "seed-" + std::to_string(rank),
         read_back(dir + "/" + manifest.shards.back().file));
  }
  manifest.epoch = 1;
  seed("checkpoint_manifest", "seed-0", manifest.to_json());
  manifest.shards.resize(1);
  seed("checkpoint_manifest", "seed-1", manifest.to_json());
}

std::string gzipped(const std::string& bytes) {
  const std::string path = dtrain::fuzz::scratch_dir() + "/seed.gz";
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  return read_back(path);
}

void idx_files() {
  const std::string images =
      std::string("\0\0\x08\x03\0\0\0\x02\0\0\0\x03\0\0\0\x04", 16) + std::string(24, '\x7f');
  const std::string labels = std::string("\0\0\x08\x01\0\0\0\x05", 8) + "\x01\x02\x03\x04\x05";
  seed("idx", "images", images);
  seed("idx", "labels", labels);
  seed("idx", "images-gz", gzipped(images));
  seed("idx", "truncated", images.substr(0, 20));
}

void cifar_files() {
  std::string record10 = std::string(1, '\x07') + std::string(3072, '\x80');
  std::string record100 = std::string("\x03\x42", 2) + std::string(3072, '\x10');
  seed("cifar", "cifar10", std::string(1, '\0') + record10 + record10);
  seed("cifar", "cifar100", std::string(1, '\1') + record100);
}

void safetensors_files() {
  const std::string path = dtrain::fuzz::scratch_dir() + "/seed.safetensors";
  dtrain::models::write_safetensors(path,
                                    {{"a.weight", at::randn({2, 3})},
                                     {"b.bias", at::arange(4, at::kLong)},
                                     {"c.half", at::ones({3}, at::kHalf)},
                                     {"d.flag", at::ones({2}, at::kBool)}},
                                    {{"format", "pt"}});
  seed("safetensors", "seed-0", read_back(path));
  dtrain::models::write_safetensors(path, {{"empty", at::empty({0, 4})}});
  seed("safetensors", "seed-1", read_back(path));
}

void glue_files() {
  seed("glue_tsv", "rte",
       std::string(1, '\0') +
           "index\tsentence1\tsentence2\tlabel\n0\tthe cat\tthe hat\tentailment\n"
           "1\tThe rat sat.\tA bat\tnot_entailment\r\n");
  seed("glue_tsv", "cola",
       std::string(1, '\1') + "gj04\t1\t\tthe cat sat\nclc95\t0\t*\tcat the the\n");
  const std::string vocab =
      R"({"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "t": 4, "h": 5, "e": 6,)"
      R"( "th": 7, "the": 8, "\u0120": 9, "\u0120the": 10, "c": 11, "a": 12})";
  const std::string merges = "#version: 0.2\nt h\nth e\n\xC4\xA0 the\n";
  seed("bpe_tokenizer", "seed-0", vocab + '\0' + merges + '\0' + "the cat, the 42 hats!");
}

void pipeline_commands() {
  using namespace dtrain::parallel::pipeline;
  for (int kind = kFirstCommandKind; kind <= kLastCommandKind; ++kind) {
    const auto k = static_cast<CommandKind>(kind);
    const at::Tensor m = to_message({k, k == CommandKind::kWireCheck ? 1 : 64, 0.05, 2, 17});
    seed("pipeline_command", "kind-" + std::to_string(kind),
         std::string(1, '\0') + bytes_of(m.data_ptr(), m.numel() * 8));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  root = argv[1];
  dtrain::fuzz::init_target();
  at::manual_seed(2026);
  codec_packets();
  checkpoints();
  idx_files();
  cifar_files();
  safetensors_files();
  glue_files();
  pipeline_commands();
  return 0;
}
