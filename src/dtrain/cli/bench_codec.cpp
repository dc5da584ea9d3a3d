// `dtrain bench codec`: ratio, error and speed of every codec on synthetic distributions,
// next to the sorting and plain-Lloyd baselines (sortquant-ref, kmeans-ref).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>

#include "dtrain/base/device.h"
#include "dtrain/base/median.h"
#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/compress/baselines.h"
#include "dtrain/compress/codec.h"
#include "dtrain/compress/hadamard.h"
#include "dtrain/data/dataset.h"
#include "dtrain/data/transforms.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/rows.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/models/registry.h"

namespace dtrain::cli {

namespace key = metrics::key;
namespace {

// Real activations at a client/server split's boundaries: the output of the
// model's first block and the input of its last block, on a batch of Fashion-MNIST.
std::vector<std::pair<std::string, at::Tensor>> activations(const std::string& model_name,
                                                            int64_t batch, uint64_t seed) {
  data::DataConfig dc;
  dc.name = "fashion-mnist";
  const data::Splits splits = data::load(dc);
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const at::Tensor x = data::make_batch(splits.train.images.narrow(0, 0, batch),
                                        data::channel_stats(splits.train.images), {}, gen);
  models::ModelConfig mc;
  mc.name = model_name;
  mc.in_channels = 1;
  mc.input_shape = {1, 28, 28};
  torch::manual_seed(seed);
  auto model = models::make_model(mc);
  model->eval();
  torch::NoGradGuard no_grad;
  at::Tensor h = x, first, last;
  size_t i = 0;
  for (auto& block : *model) {
    if (i + 1 == model->size()) last = h.clone();
    h = block.forward(h);
    if (i == 0) first = h.clone();
    ++i;
  }
  return {{"act-first[" + metrics::shape_string(first.sizes().vec()) + "]", first.reshape({-1})},
          {"act-last[" + metrics::shape_string(last.sizes().vec()) + "]", last.reshape({-1})}};
}

struct CodecOptions {
  std::string codecs =
      "uniform:8,sortquant:8,sortquant-ref:8,sortquant:4,kmeans:4:20,kmeans-ref:4:20,fp16";
  std::string dists = "gaussian,relu,laplace,student-t3";
  std::string numels = "1M,16M";
  int threads = 1;
  int reps = 3;
  int warmup = 8;
  uint64_t seed = 0;
  std::string model = "mobilenetv2";
  int64_t batch = 64;
  c10::Device device{c10::kCPU};
  Output output;
};

// Optimal (Lloyd-Max) MSE / variance of a B-bit scalar quantizer for a Gaussian source
// (Max 1960; 1 bit is exactly 1 - 2/pi).
std::optional<double> lloyd_max_bound(int bits) {
  switch (bits) {
    case 1:
      return 0.3634;
    case 2:
      return 0.1175;
    case 3:
      return 0.03454;
    case 4:
      return 0.009497;
    default:
      return std::nullopt;
  }
}

at::Tensor sample(const std::string& dist, int64_t n, uint64_t seed) {
  at::manual_seed(seed);
  if (dist == "gaussian") return at::randn({n});
  if (dist == "relu") return at::relu(at::randn({n}));
  if (dist == "laplace") {  // inverse CDF of Laplace(0, 1)
    const at::Tensor u = at::rand({n}) - 0.5;
    return -at::sign(u) * at::log1p(-2 * u.abs().clamp_max(0.4999999));
  }
  if (dist == "student-t3") {  // N(0,1) / sqrt(chi2_3 / 3)
    const at::Tensor z = at::randn({n});
    const at::Tensor chi2 = at::randn({3, n}).pow(2).sum(0);
    return z / (chi2 / 3).sqrt();
  }
  if (dist == "outliers") {  // outlier features: 1 position in 64 at 50 times the scale
    at::Tensor x = at::randn({n});
    x.slice(0, 0, n, 64).mul_(50.f);
    return x;
  }
  throw std::invalid_argument(
      "--dist '" + dist +
      "': expected gaussian, relu, laplace, student-t3, outliers or activations");
}

// A codec under test: a real one, or a baseline named "<family>-ref:...".
struct Subject {
  std::string name;
  int bits = 0;
  std::function<std::function<at::Tensor()>(const at::Tensor&, int64_t&)> prepare;
  bool cpu_only = false;  // the baselines run on the CPU
};

Subject make_subject(const std::string& name, int threads) {
  Subject s;
  s.name = name;
  if (name.rfind("sortquant-ref:", 0) == 0) {
    s.cpu_only = true;
    const auto spec = compress::parse_codec("sortquant:" + name.substr(14));
    const int q = spec.bits - spec.split_bits, sb = spec.split_bits;
    s.bits = spec.bits;
    // Encode returns a decoder closure so decode is timed on its own.
    s.prepare = [q, sb, bits = spec.bits](const at::Tensor& x, int64_t& wire) {
      auto encoded = std::make_shared<compress::baseline::SortQuantResult>(
          compress::baseline::sortquant_encode(x, q, sb));
      wire = x.numel() * ((bits + 7) / 8) + encoded->table.numel() * 4;
      return std::function<at::Tensor()>(
          [encoded, q] { return compress::baseline::sortquant_decode(*encoded, q); });
    };
    return s;
  }
  if (name.rfind("kmeans-ref:", 0) == 0) {
    s.cpu_only = true;
    const auto spec = compress::parse_codec("kmeans:" + name.substr(11));
    if (spec.iters == 0)
      throw std::invalid_argument(name + ": give the iterations, e.g. kmeans-ref:4:20");
    s.bits = spec.bits;
    s.prepare = [spec](const at::Tensor& x, int64_t& wire) {
      auto encoded = std::make_shared<compress::baseline::KMeansResult>(
          compress::baseline::kmeans(x, 1 << spec.bits, spec.iters));
      wire = x.numel() * ((spec.bits + 7) / 8) + (int64_t{4} << spec.bits);
      const auto shape = x.sizes().vec();
      return std::function<at::Tensor()>(
          [encoded, shape] { return compress::baseline::kmeans_decode(*encoded, shape); });
    };
    return s;
  }
  if (name.rfind("hadamard:", 0) == 0) {  // the rotation alone: rotate, then rotate back
    const auto spec = compress::parse_codec("rot:" + name.substr(9) + ":uniform:8");
    compress::Rotation r;
    r.tile_log2 = spec.tile_log2;
    r.seed = 1;
    s.bits = 32;
    s.prepare = [r, threads](const at::Tensor& x, int64_t& wire) {
      wire = 4 * x.numel();
      auto rotated = std::make_shared<at::Tensor>();
      if (x.is_cpu()) {
        *rotated = x.contiguous().clone();
        compress::rotate(rotated->data_ptr<float>(), rotated->numel(), r, threads);
      } else {
        *rotated = compress::rotate(x.contiguous().view({-1}), r);
      }
      return std::function<at::Tensor()>([rotated, r, threads] {
        if (!rotated->is_cpu()) return compress::unrotate(*rotated, r);
        compress::unrotate(rotated->data_ptr<float>(), rotated->numel(), r, threads);
        return *rotated;
      });
    };
    return s;
  }
  auto codec = std::shared_ptr<compress::Codec>(compress::make_codec(name));
  s.bits = codec->spec().bits;
  s.prepare = [codec, threads](const at::Tensor& x, int64_t& wire) {
    auto packet = std::make_shared<compress::Packet>(compress::encode(*codec, x, threads));
    wire = static_cast<int64_t>(packet->size());
    // Decoded where the tensor lives: on a GPU from the payload, with tensor operations.
    return std::function<at::Tensor()>([packet, threads, device = x.device()] {
      return compress::decode(packet->data(), packet->size(), threads, device);
    });
  };
  return s;
}

std::vector<metrics::Column> codec_columns() {
  return {{key::kCodec, "codec"},
          {key::kDist, "dist"},
          {key::kNumel, "numel"},
          {key::kRatio, "ratio", 4},
          {key::kMseOverVar, "mse/var", 6},
          {key::kLloydMaxBound, "lloyd-max", 6},
          {key::kMaxAbsErr, "max|err|", 4},
          {key::kEncodeGbps, "enc(GB/s)", 3},
          {key::kDecodeGbps, "dec(GB/s)", 3},
          {key::kEncodeMs, "enc(ms)", 2},
          {key::kDecodeMs, "dec(ms)", 2}};
}

int run_codec(const CodecOptions& o) {
  std::vector<Subject> subjects;
  for (const auto& name : split_list(o.codecs))
    subjects.push_back(make_subject(name, o.threads));
  const auto dists = split_list(o.dists);
  std::vector<int64_t> numels;
  for (const auto& n : split_list(o.numels))
    numels.push_back(parse_size(n));
  for (const auto& d : dists) {  // validate names before the long work
    if (d != "activations") sample(d, 1, 0);
  }
  at::set_num_threads(o.threads);

  std::vector<metrics::Row> rows;
  // (label, values, numel): synthetic samples per size and distribution, real activations once.
  std::vector<std::tuple<std::string, at::Tensor, int64_t>> inputs;
  for (const int64_t n : numels) {
    for (const auto& dist : dists) {
      if (dist != "activations") inputs.emplace_back(dist, at::Tensor(), n);
    }
  }
  if (std::find(dists.begin(), dists.end(), "activations") != dists.end()) {
    for (auto& [label, values] : activations(o.model, o.batch, o.seed)) {
      inputs.emplace_back(label, values, values.numel());
    }
  }
  for (const auto& [dist, given, n] : inputs) {
    {
      const at::Tensor x = (given.defined() ? given : sample(dist, n, o.seed)).to(o.device);
      const double var = x.to(at::kDouble).var().item<double>();
      for (const auto& s : subjects) {
        std::vector<double> enc, dec;
        at::Tensor y;
        int64_t wire = 0;
        // Untimed reps first: over the first 4-8 reps of a size glibc's heap settles, and
        // until it has, each decode's output takes fresh pages (27 ms instead of 4.6 for
        // 16M values). The baselines skip them: seconds per rep dwarf that.
        for (int r = 0; r < o.warmup && !s.cpu_only; ++r) {
          y = s.prepare(x, wire)().to(o.device);
          synchronize(o.device);
        }
        // Slow subjects (the O(n k) baseline) stop repeating once they have used kSlowBudget.
        constexpr double kSlowBudget = 10.0;
        double spent = 0;
        for (int r = 0; r < o.reps && spent < kSlowBudget; ++r) {
          std::function<at::Tensor()> decoder;
          // On a GPU the times include the packet's copy to or from host memory and the
          // device's queue.
          enc.push_back(metrics::seconds([&] {
            decoder = s.prepare(s.cpu_only ? x.cpu() : x, wire);
            synchronize(o.device);
          }));
          dec.push_back(metrics::seconds([&] {
            y = decoder().to(o.device);
            synchronize(o.device);
          }));
          spent += enc.back() + dec.back();
        }
        const at::Tensor err = (x.to(at::kDouble) - y.to(at::kDouble));
        metrics::Row row;
        row[key::kBench] = "codec";
        row[key::kCodec] = s.name;
        row[key::kDist] = dist;
        row[key::kNumel] = n;
        row[key::kDevice] = to_string(o.device);
        row[key::kRatio] = compress::compression_ratio(static_cast<size_t>(wire), n);
        row[key::kMseOverVar] = var > 0 ? err.pow(2).mean().item<double>() / var : 0.0;
        row[key::kMaxAbsErr] = err.abs().max().item<double>();
        const double enc_s = median(enc), dec_s = median(dec);
        row[key::kEncodeGbps] = 4.0 * n / enc_s / 1e9;
        row[key::kDecodeGbps] = 4.0 * n / dec_s / 1e9;
        row[key::kEncodeMs] = enc_s * 1e3;
        row[key::kReps] = static_cast<int>(enc.size());
        row[key::kDecodeMs] = dec_s * 1e3;
        const auto bound = lloyd_max_bound(s.bits);
        row[key::kLloydMaxBound] = dist == "gaussian" && bound ? nlohmann::ordered_json(*bound)
                                                               : nlohmann::ordered_json(nullptr);
        std::cerr << "bench codec: " << s.name << " " << dist << " " << n << ": ratio "
                  << row[key::kRatio].get<double>() << ", mse/var "
                  << row[key::kMseOverVar].get<double>() << ", encode "
                  << row[key::kEncodeGbps].get<double>() << " GB/s, decode "
                  << row[key::kDecodeGbps].get<double>() << " GB/s" << std::endl;
        rows.push_back(row);
      }
    }
  }
  emit_output(o.output, codec_columns(), rows);
  return 0;
}

}  // namespace

void register_bench_codec(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<CodecOptions>();
  CLI::App* sub = bench.add_subcommand(
      "codec",
      "ratio (wire bytes / fp32 bytes), MSE / variance, max error and encode/decode speed (GB/s "
      "of float32 input) per codec and distribution; '-ref' names are the reference "
      "baselines (sortquant-ref:B sorts the whole tensor, kmeans-ref:B:I is plain O(nk) Lloyd); "
      "hadamard:T is the rot codecs' rotation alone over tiles of T values (the numel a "
      "multiple of T)");
  sub->add_option("--codec", o->codecs, "comma list of codecs\n" + compress::codec_help())
      ->capture_default_str();
  sub->add_option("--dist", o->dists,
                  "gaussian, relu, laplace, student-t3, outliers (Gaussian, every 64th value 50x), "
                  "activations (first-block output and "
                  "last-block input of --model on a Fashion-MNIST batch, untrained weights)")
      ->capture_default_str();
  sub->add_option("--model", o->model, "model for --dist activations")->capture_default_str();
  sub->add_option("--batch", o->batch, "batch size for --dist activations")->capture_default_str();
  sub->add_option("--numel", o->numels, "values per tensor (1M = 2^20)")->capture_default_str();
  add_typed_option(sub, "--device", o->device, parse_device,
                   "cpu, cuda or cuda:N: where the tensors live (CUDA tensors are coded on the GPU "
                   "and only packets cross to host memory, kmeans and the references through "
                   "host memory; times include the copies)",
                   "cpu");
  sub->add_option("--threads", o->threads,
                  "threads: LibTorch's intra-op threads and the codecs' own (tensors of 1M "
                  "values and more)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--reps", o->reps,
                  "timed repetitions, the median is reported (a codec stops repeating after 10 s)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--warmup", o->warmup, "untimed repetitions before the timed ones")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "seed for the input samples")->capture_default_str();
  add_output_flags(sub, o->output);
  sub->callback([o, &exit_code] { exit_code = run_codec(*o); });
}

}  // namespace dtrain::cli
