// GPU tests (ctest label "gpu"): the same code paths with CUDA tensors, against the CPU as
// the reference. They skip, saying why, where no CUDA device is visible (CI).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>

#include "../support/e2e.h"
#include "../support/ranks.h"
#include "dtrain/base/device.h"
#include "dtrain/compress/codec.h"
#include "dtrain/compress/error_feedback.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/train/trainer.h"

namespace dtrain {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU: " << cuda_summary()

TEST(GpuCodecTest, CudaTensorsGiveTheCpuPacketsBitForBit) {
  SKIP_WITHOUT_CUDA();
  const c10::Device cuda = parse_device("cuda");
  torch::manual_seed(7);
  const at::Tensor x = torch::randn({3, 1000, 7}).relu_() - 0.1;
  for (const char* name :
       {"none", "fp16", "bf16", "uniform:8", "sortquant:8", "sortquant:4:2", "kmeans:4:10",
        "tile:2", "tile:4", "rot:tile:2", "rot:tile:4", "rot:64:uniform:4", "rot:sortquant:4"}) {
    const auto codec = compress::make_codec(name);
    const compress::Packet on_cpu = compress::encode(*codec, x);
    const compress::Packet on_gpu = compress::encode(*codec, x.to(cuda));
    EXPECT_EQ(on_cpu, on_gpu) << name;
    const at::Tensor back = compress::decode(on_gpu, cuda);
    EXPECT_TRUE(back.device().is_cuda()) << name;
    EXPECT_TRUE(at::equal(back.cpu(), compress::decode(on_cpu))) << name;
  }
  // Packed widths other than 8, > 15 sortquant thresholds, odd sizes, ties, signed zeros.
  const at::Tensor ties = torch::randint(-2, 3, {4099}).to(torch::kFloat) * 0.25f;
  const at::Tensor zeros =
      torch::cat({-torch::relu(torch::randn({500})), torch::relu(torch::randn({501}))});
  for (const at::Tensor& y : {ties, zeros}) {
    for (const char* name :
         {"uniform:3", "uniform:13", "sortquant:2:6", "sortquant:16", "sortquant:4"}) {
      const auto codec = compress::make_codec(name);
      EXPECT_EQ(compress::encode(*codec, y.to(cuda)), compress::encode(*codec, y)) << name;
    }
  }
  // Error feedback keeps its residual beside the tensor and matches the CPU's, step by step.
  compress::ErrorFeedback on_cpu, on_gpu;
  const auto codec = compress::make_codec("sortquant:4");
  for (int step = 0; step < 3; ++step) {
    const at::Tensor g = torch::randn({2000});
    EXPECT_EQ(on_gpu.encode(*codec, g.to(cuda)), on_cpu.encode(*codec, g)) << "step " << step;
    EXPECT_TRUE(on_gpu.residual().device().is_cuda());
    EXPECT_TRUE(at::equal(on_gpu.residual().cpu(), on_cpu.residual()));
  }
}

train::TrainConfig small_run() {
  train::TrainConfig c;
  c.model.name = "mlp";
  c.model.width = 0.25;
  c.data.name = "synthetic";
  c.data.input_shape = {1, 8, 8};
  c.data.num_classes = 4;
  c.data.synthetic_size = 512;
  c.epochs = 2;
  c.batch_size = 32;
  c.optim.lr = 0.05;
  c.seed = 3;
  c.progress = false;
  return c;
}

TEST(GpuTrainTest, CudaTrainingFollowsTheCpuRun) {
  SKIP_WITHOUT_CUDA();
  train::TrainConfig c = small_run();
  const auto cpu = train::train(c);
  c.device = parse_device("cuda");
  const auto gpu = train::train(c);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t e = 0; e < cpu.size(); ++e) {
    EXPECT_NEAR(gpu[e].train_loss, cpu[e].train_loss, 1e-3 * cpu[e].train_loss) << "epoch " << e;
    EXPECT_NEAR(gpu[e].test_acc, cpu[e].test_acc, 0.02) << "epoch " << e;
  }
  EXPECT_GT(gpu.back().extra.value(metrics::key::kCudaMaxAllocatedBytes, int64_t{0}), 0);
}

// Through the binary: each rank a process with its own random generator (ranks as threads
// would share LibTorch's global one while building the model). Two epochs of a small
// synthetic run (learning rate 0.05 unless `flags` give one) with `flags` added; the metrics
// lines (two epochs and the summary).
std::vector<nlohmann::json> ranked_run(const std::vector<std::string>& flags,
                                       const std::string& tag) {
  const std::string metrics = "/tmp/dtrain-gpu-" + tag + "-" + std::to_string(getpid()) + ".jsonl";
  std::vector<std::string> argv{DTRAIN_BINARY,
                                "train",
                                "-n",
                                "2",
                                "--dataset",
                                "synthetic",
                                "--num-classes",
                                "4",
                                "--synthetic-size",
                                "512",
                                "--epochs",
                                "2",
                                "--seed",
                                "3",
                                "--metrics",
                                metrics,
                                "--no-progress"};
  if (std::find(flags.begin(), flags.end(), "--lr") == flags.end())
    argv.insert(argv.end(), {"--lr", "0.05"});
  argv.insert(argv.end(), flags.begin(), flags.end());
  testing::Process p(argv);
  EXPECT_EQ(p.wait_for(std::chrono::seconds(120)), 0) << p.err();
  return testing::take_json_lines_file(metrics);
}

// The two epochs' training losses agree within `relative` (GPU kernels sum in other orders),
// or within `absolute` where that is larger (a loss near zero).
void expect_same_losses(const std::vector<nlohmann::json>& cpu,
                        const std::vector<nlohmann::json>& gpu, double relative,
                        double absolute = 0) {
  ASSERT_EQ(cpu.size(), 3u);  // two epochs and the summary
  ASSERT_EQ(gpu.size(), 3u);
  for (size_t e = 0; e < 2; ++e) {
    const double a = cpu[e]["train_loss"].get<double>(), b = gpu[e]["train_loss"].get<double>();
    EXPECT_NEAR(b, a, std::max(relative * a, absolute)) << "epoch " << e;
  }
}

// `mode`'s flags, then `extra`.
std::vector<std::string> flags(std::vector<std::string> mode,
                               const std::vector<std::string>& extra) {
  mode.insert(mode.end(), extra.begin(), extra.end());
  return mode;
}

TEST(GpuPipelineTest, CpuClientWithGpuServerFollowsTheCpuPipeline) {
  SKIP_WITHOUT_CUDA();
  const std::vector<std::string> pipeline{"--input-shape", "1,8,8",  "--parallel",   "pipeline",
                                          "--placement",   "ushape", "--model",      "mlp",
                                          "--depth",       "3",      "--batch-size", "32",
                                          "--chunks",      "4"};
  const auto cpu = ranked_run(flags(pipeline, {}), "pipe-cpu");
  const auto mixed =
      ranked_run(flags(pipeline, {"--device", "cuda", "--client-device", "cpu"}), "pipe-mixed");
  expect_same_losses(cpu, mixed, 1e-3);
  // Rank 0 writes the rows; as a CPU client it has no GPU memory of its own to report, and
  // the server reports its own in its stage row.
  EXPECT_FALSE(mixed[0].contains("cuda_max_allocated_bytes"));
  const auto& stages = mixed[0]["stages"];
  ASSERT_EQ(stages.size(), 2u) << mixed[0].dump();
  EXPECT_FALSE(stages[0].contains("cuda_max_allocated_bytes"));
  EXPECT_GT(stages[1].value("cuda_max_allocated_bytes", int64_t{0}), 0) << stages[1].dump();
  // Coded boundaries: the server codes its packets on the GPU, the same bytes as the CPU's.
  const std::vector<std::string> coded{"--compress", "sortquant:8"};
  expect_same_losses(ranked_run(flags(pipeline, coded), "pipe-cpu-coded"),
                     ranked_run(flags(pipeline, {coded[0], coded[1], "--device", "cuda",
                                                 "--client-device", "cpu"}),
                                "pipe-mixed-coded"),
                     1e-3);
}

// Both ranks on the one GPU a test machine has: buckets are staged through host memory
// for Gloo, so two ranks may share a device (NCCL would refuse it).
TEST(GpuDdpTest, CudaDdpFollowsTheCpuDdp) {
  SKIP_WITHOUT_CUDA();
  const std::vector<std::string> ddp{"--input-shape", "1,8,8", "--parallel",   "ddp",
                                     "--model",       "mlp",   "--batch-size", "16"};
  const auto cpu = ranked_run(flags(ddp, {}), "ddp-cpu");
  const auto gpu = ranked_run(flags(ddp, {"--device", "cuda"}), "ddp-cuda");
  expect_same_losses(cpu, gpu, 1e-3);
  EXPECT_GT(gpu[0].value("cuda_max_allocated_bytes", int64_t{0}), 0);
  // Small buckets (several per step, reduced while backward runs) and compressed gradients
  // take the same staging.
  const auto cpu_coded = ranked_run(
      flags(ddp, {"--bucket-mb", "0.01", "--compress-grad", "sortquant:8"}), "ddp-cpu-coded");
  const auto gpu_coded = ranked_run(
      flags(ddp, {"--bucket-mb", "0.01", "--compress-grad", "sortquant:8", "--device", "cuda"}),
      "ddp-cuda-coded");
  // Coded on the GPU (a fixed codec keeps the buckets there), the same packets as the CPU's.
  expect_same_losses(cpu_coded, gpu_coded, 5e-3);
  // The largest rank's GPU memory beside rank 0's own.
  EXPECT_GT(gpu[0].value("cuda_max_allocated_max_bytes", int64_t{0}), 0) << gpu[0].dump();
  EXPECT_GE(gpu[0].value("cuda_max_allocated_max_bytes", int64_t{0}),
            gpu[0].value("cuda_max_allocated_bytes", int64_t{0}));
}

// DiLoCo's inner steps, outer step and coded outer exchange (error feedback's residual on the
// GPU) on CUDA models, blocking and streaming, against the same runs on the CPU.
TEST(GpuDilocoTest, CudaDilocoFollowsTheCpuDiloco) {
  SKIP_WITHOUT_CUDA();
  const std::vector<std::string> diloco{"--input-shape", "1,8,8", "--parallel",   "diloco",
                                        "--model",       "mlp",   "--batch-size", "16",
                                        "--sync-every",  "4"};
  for (const std::vector<std::string>& variant :
       {std::vector<std::string>{},
        {"--compress-outer", "rot:tile:2"},
        {"--compress-outer", "rot:tile:2", "--fragments", "2", "--sync-delay", "1"}}) {
    const std::string tag = "diloco-" + std::to_string(variant.size());
    const auto cpu = ranked_run(flags(flags(diloco, variant), {}), tag + "-cpu");
    const auto gpu = ranked_run(flags(flags(diloco, variant), {"--device", "cuda"}), tag + "-cuda");
    // Coded: a rounding difference in an inner step may move a value across a 2-bit level.
    // The second epoch's loss is near zero (below 0.01): bounded in absolute terms.
    expect_same_losses(cpu, gpu, variant.empty() ? 1e-3 : 2e-2, 2e-3);
  }
}

// resnet18: BatchNorm and no dropout. A model with dropout (mobilenetv2, cnn) would draw
// its masks from the CPU's generator on one side and CUDA's on the other: two runs on
// different noise, 2-6 % apart in loss on an H100. At a learning rate of 0.05 resnet18's run
// is chaotic: the CPU alone with 1 and 2 threads ended epoch 2 at 0.175 and 0.097, and an
// H200 at 0.243 against its CPU's 0.151. At 0.002 the CPU's thread counts agree within
// 0.2 %, so a 2 % bound sees the device, not the chaos.
TEST(GpuDdpTest, CudaSyncBatchNormFollowsTheCpuOne) {
  SKIP_WITHOUT_CUDA();
  const std::vector<std::string> syncbn{"--parallel", "ddp",           "--model", "resnet18",
                                        "--sync-bn",  "--input-shape", "1,28,28", "--batch-size",
                                        "16",         "--lr",          "0.002"};
  const auto cpu = ranked_run(flags(syncbn, {}), "syncbn-cpu");
  const auto gpu = ranked_run(flags(syncbn, {"--device", "cuda"}), "syncbn-cuda");
  // cuDNN convolutions may run in TF32 (LibTorch's default): a looser bound than the mlp's,
  // still far below what a misplaced statistic or an unreduced gradient would cost.
  expect_same_losses(cpu, gpu, 2e-2);
}

#define SKIP_WITHOUT_TWO_GPUS()        \
  if (torch::cuda::device_count() < 2) \
  GTEST_SKIP() << "needs 2 GPUs (NCCL refuses two ranks on one GPU): " << cuda_summary()

// `dtrain bench collective` of all_reduce on CUDA buffers with `extra` flags; its rows, and
// its exit status and stderr through the pointers.
std::vector<nlohmann::json> cuda_collective(const std::vector<std::string>& extra, int* status,
                                            std::string* err) {
  const std::string out = "/tmp/dtrain-gpu-coll-" + std::to_string(getpid()) + ".jsonl";
  std::vector<std::string> argv{DTRAIN_BINARY, "bench",  "collective", "--device", "cuda",
                                "--sizes",     "4K,16M", "--iters",    "3",        "--format",
                                "jsonl",       "--out",  out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  testing::Process p(argv);
  *status = p.wait_for(std::chrono::seconds(120));
  *err = p.err();
  return *status == 0 ? testing::take_json_lines_file(out) : std::vector<nlohmann::json>{};
}

// busbw = algbw * 2(p-1)/p is 0 for a world of one by definition: there, algbw.
void expect_exact(const std::vector<nlohmann::json>& rows) {
  ASSERT_EQ(rows.size(), 2u);  // two sizes, native
  for (const auto& row : rows) {
    EXPECT_EQ(row["algo"], "native") << row.dump();
    EXPECT_EQ(row["wrong"], 0) << row.dump();
    const char* bandwidth = row["world"].get<int>() > 1 ? "busbw_gbps" : "algbw_gbps";
    EXPECT_GT(row[bandwidth].get<double>(), 0) << row.dump();
  }
}

// One GPU: NCCL with a world of one (its communicator made and checked at connect), and two
// ranks sharing the GPU, where auto reduces through host memory over Gloo and nccl is refused
// by name.
TEST(GpuCollectiveTest, OneGpuServesNcclAloneAndGlooForRanksSharingIt) {
  SKIP_WITHOUT_CUDA();
  int status = 0;
  std::string err;
  expect_exact(cuda_collective({"--backend", "nccl"}, &status, &err));
  EXPECT_NE(err.find("collectives of CUDA tensors: nccl"), std::string::npos) << err;
  if (torch::cuda::device_count() == 1) {
    expect_exact(cuda_collective({"-n", "2"}, &status, &err));
    EXPECT_NE(err.find("collectives of CUDA tensors: gloo (local ranks share a GPU"),
              std::string::npos)
        << err;
    cuda_collective({"-n", "2", "--backend", "nccl"}, &status, &err);
    EXPECT_NE(status, 0);
    EXPECT_NE(err.find("needs a GPU per local rank"), std::string::npos) << err;
  }
}

// `dtrain bench p2p` on CUDA buffers with `extra` flags: its rows (each checks one message
// of a known pattern: `wrong`), and its exit status and stderr through the pointers.
std::vector<nlohmann::json> cuda_p2p(const std::vector<std::string>& extra, int* status,
                                     std::string* err) {
  const std::string out = "/tmp/dtrain-gpu-p2p-" + std::to_string(getpid()) + ".jsonl";
  std::vector<std::string> argv{DTRAIN_BINARY, "bench",    "p2p",     "-n",    "2",
                                "--device",    "cuda",     "--sizes", "4K,3M", "--iters",
                                "3",           "--format", "jsonl",   "--out", out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  testing::Process p(argv);
  *status = p.wait_for(std::chrono::seconds(120));
  *err = p.err();
  return *status == 0 ? testing::take_json_lines_file(out) : std::vector<nlohmann::json>{};
}

// Point-to-point of CUDA tensors between ranks sharing a GPU goes through host memory and
// Gloo, checked: small (inline check) and large (pieces) messages arrive intact on the GPU.
TEST(GpuP2pTest, CudaTensorsCrossThroughHostMemoryBetweenRanksSharingAGpu) {
  SKIP_WITHOUT_CUDA();
  const c10::Device cuda = parse_device("cuda");
  testing::run_ranks(2, [&](comm::Group& g) {
    for (const int64_t n : {int64_t{1000}, int64_t{3} << 20}) {
      const at::Tensor sent = torch::arange(n, torch::kFloat).to(cuda);
      if (g.rank() == 0) {
        g.send(sent, 1, 5);
      } else {
        at::Tensor got = torch::zeros({n}, torch::TensorOptions().device(cuda));
        g.recv(got, 0, 5);
        EXPECT_TRUE(got.device().is_cuda());
        EXPECT_TRUE(at::equal(got, sent)) << n << " values";
      }
    }
  });
  int status = 0;
  std::string err;
  if (torch::cuda::device_count() == 1) {
    const auto rows = cuda_p2p({}, &status, &err);
    ASSERT_EQ(rows.size(), 2u) << err;
    for (const auto& row : rows) {
      EXPECT_EQ(row["path"], "gloo staged") << row.dump();
      EXPECT_EQ(row["wrong"], 0) << row.dump();
      EXPECT_GT(row["bandwidth_gbps"].get<double>(), 0) << row.dump();
    }
  }
}

// Two GPUs, a rank on each: NCCL's all-reduce and point-to-point are exact, and DDP whose exact
// gradients NCCL reduces on the GPUs follows DDP that reduces them over Gloo in host memory.
TEST(GpuNcclTest, NcclAllReduceAndP2pAreExactAndNcclDdpFollowsGlooDdp) {
  SKIP_WITHOUT_TWO_GPUS();
  int status = 0;
  std::string err;
  expect_exact(cuda_collective({"-n", "2", "--backend", "nccl"}, &status, &err));
  const auto p2p = cuda_p2p({"--backend", "nccl"}, &status, &err);
  ASSERT_EQ(p2p.size(), 2u) << err;
  for (const auto& row : p2p) {
    EXPECT_EQ(row["path"], "nccl") << row.dump();
    EXPECT_EQ(row["wrong"], 0) << row.dump();
  }
  const std::vector<std::string> ddp{"--input-shape", "1,8,8", "--parallel",   "ddp",
                                     "--model",       "mlp",   "--batch-size", "16",
                                     "--device",      "cuda",  "--bucket-mb",  "0.01"};
  const auto gloo = ranked_run(flags(ddp, {"--backend", "gloo"}), "ddp-gloo");
  const auto nccl = ranked_run(flags(ddp, {"--backend", "nccl"}), "ddp-nccl");
  expect_same_losses(gloo, nccl, 1e-4);
  // Coded buckets: with NCCL they are coded on the GPUs, with Gloo in pinned host memory;
  // the packets are the same bytes, so the runs agree as closely.
  const std::vector<std::string> coded{"--compress-grad", "sortquant:8"};
  const auto gloo_coded =
      ranked_run(flags(ddp, {"--backend", "gloo", coded[0], coded[1]}), "ddp-gloo-coded");
  const auto nccl_coded =
      ranked_run(flags(ddp, {"--backend", "nccl", coded[0], coded[1]}), "ddp-nccl-coded");
  expect_same_losses(gloo_coded, nccl_coded, 1e-4);
}

TEST(GpuDeviceTest, BadDeviceNamesAreClearErrors) {
  EXPECT_THROW(parse_device("tpu"), std::invalid_argument);
  EXPECT_THROW(parse_device("cuda:99999"), std::invalid_argument);
  if (!torch::cuda::is_available()) {
    try {
      parse_device("cuda");
      FAIL() << "no error without a GPU";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
    }
  }
}

TEST(GpuDeviceTest, MalformedLocalRankIsAnErrorNotGpuZero) {
  SKIP_WITHOUT_CUDA();
  const char* before = std::getenv("LOCAL_RANK");
  const std::string saved = before != nullptr ? before : "";
  setenv("LOCAL_RANK", "one", 1);
  EXPECT_THROW(parse_device("cuda"), std::invalid_argument);
  setenv("LOCAL_RANK", "0", 1);
  EXPECT_EQ(parse_device("cuda").index(), 0);
  if (before != nullptr)
    setenv("LOCAL_RANK", saved.c_str(), 1);
  else
    unsetenv("LOCAL_RANK");
}

}  // namespace
}  // namespace dtrain
