// GPU tests (ctest label "gpu"): the same code paths with CUDA tensors, against the CPU as
// the reference. They skip, saying why, where no CUDA device is visible (CI).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <unistd.h>

#include "../support/e2e.h"
#include "dtrain/base/device.h"
#include "dtrain/compress/codec.h"
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
       {"none", "fp16", "bf16", "uniform:8", "sortquant:8", "sortquant:4:2", "kmeans:4:10"}) {
    const auto codec = compress::make_codec(name);
    const compress::Packet on_cpu = compress::encode(*codec, x);
    const compress::Packet on_gpu = compress::encode(*codec, x.to(cuda));
    EXPECT_EQ(on_cpu, on_gpu) << name;
    const at::Tensor back = compress::decode(on_gpu, cuda);
    EXPECT_TRUE(back.device().is_cuda()) << name;
    EXPECT_TRUE(at::equal(back.cpu(), compress::decode(on_cpu))) << name;
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
// would share LibTorch's global one while building the model).
std::vector<nlohmann::json> pipeline_run(const std::vector<std::string>& device_flags,
                                         const std::string& tag) {
  const std::string metrics =
      "/tmp/dtrain-gpu-pipe-" + tag + "-" + std::to_string(getpid()) + ".jsonl";
  std::vector<std::string> argv{DTRAIN_BINARY,
                                "train",
                                "--parallel",
                                "pipeline",
                                "-n",
                                "2",
                                "--placement",
                                "ushape",
                                "--model",
                                "mlp",
                                "--depth",
                                "3",
                                "--dataset",
                                "synthetic",
                                "--input-shape",
                                "1,8,8",
                                "--num-classes",
                                "4",
                                "--synthetic-size",
                                "512",
                                "--epochs",
                                "2",
                                "--batch-size",
                                "32",
                                "--chunks",
                                "4",
                                "--lr",
                                "0.05",
                                "--seed",
                                "3",
                                "--metrics",
                                metrics,
                                "--no-progress"};
  argv.insert(argv.end(), device_flags.begin(), device_flags.end());
  testing::Process p(argv);
  EXPECT_EQ(p.wait_for(std::chrono::seconds(120)), 0) << p.err();
  return testing::take_json_lines_file(metrics);
}

TEST(GpuPipelineTest, CpuClientWithGpuServerFollowsTheCpuPipeline) {
  SKIP_WITHOUT_CUDA();
  const auto cpu = pipeline_run({}, "cpu");
  const auto mixed = pipeline_run({"--device", "cuda", "--client-device", "cpu"}, "mixed");
  ASSERT_EQ(cpu.size(), 3u);  // two epochs and the summary
  ASSERT_EQ(mixed.size(), 3u);
  for (size_t e = 0; e < 2; ++e) {
    const double a = cpu[e]["train_loss"].get<double>(), b = mixed[e]["train_loss"].get<double>();
    EXPECT_NEAR(b, a, 1e-3 * a) << "epoch " << e;
  }
  // Rank 0 writes the rows; as a CPU client it has no GPU memory of its own to report.
  EXPECT_FALSE(mixed[0].contains("cuda_max_allocated_bytes"));
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
