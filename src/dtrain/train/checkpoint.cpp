#include "dtrain/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace dtrain::train {

std::string checkpoint_path(const std::string& dir) {
  return dir + "/last.pt";
}

void save_checkpoint(const std::string& dir, int64_t next_epoch, torch::nn::Sequential& model,
                     torch::optim::Optimizer& optimizer) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot create checkpoint directory " + dir + ": " + strerror(errno));
  }
  torch::serialize::OutputArchive archive, model_archive, optim_archive;
  model->save(model_archive);
  optimizer.save(optim_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optim_archive);
  archive.write("next_epoch", torch::tensor(next_epoch));
  archive.write("rng", at::detail::getDefaultCPUGenerator().get_state());
  const std::string final_path = checkpoint_path(dir);
  const std::string tmp = final_path + ".tmp." + std::to_string(getpid());
  archive.save_to(tmp);
  const int fd = open(tmp.c_str(), O_RDONLY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  if (rename(tmp.c_str(), final_path.c_str()) != 0) {
    unlink(tmp.c_str());
    throw std::runtime_error("cannot write checkpoint " + final_path + ": " + strerror(errno));
  }
}

std::optional<int64_t> load_checkpoint(const std::string& dir, torch::nn::Sequential& model,
                                       torch::optim::Optimizer& optimizer) {
  const std::string path = checkpoint_path(dir);
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  try {
    torch::serialize::InputArchive archive, model_archive, optim_archive;
    archive.load_from(path);
    archive.read("model", model_archive);
    archive.read("optimizer", optim_archive);
    model->load(model_archive);
    optimizer.load(optim_archive);
    torch::Tensor next_epoch, rng;
    archive.read("next_epoch", next_epoch);
    archive.read("rng", rng);
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(rng);
    return next_epoch.item<int64_t>();
  } catch (const c10::Error& e) {
    const std::string what = e.what();
    throw std::runtime_error(path + ": not a usable checkpoint for this model/optimizer: " +
                             what.substr(0, what.find('\n')));
  }
}

}  // namespace dtrain::train
