#include <ATen/ATen.h>
#include <sys/stat.h>

#include <stdexcept>

#include "dtrain/data/dataset.h"
#include "dtrain/data/glue.h"

namespace dtrain::data {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// "train-images-idx3-ubyte" with or without ".gz".
std::string find_idx(const std::string& dir, const std::string& stem) {
  for (const std::string& candidate : {dir + "/" + stem + ".gz", dir + "/" + stem}) {
    if (exists(candidate)) return candidate;
  }
  throw std::runtime_error("missing " + dir + "/" + stem + "[.gz]");
}

Dataset idx_split(const std::string& dir, const std::string& prefix, const std::string& name) {
  Dataset d;
  d.name = name;
  const std::string images_path = find_idx(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx(dir, prefix + "-labels-idx1-ubyte");
  at::Tensor images = read_idx(images_path);
  at::Tensor labels = read_idx(labels_path);
  if (images.dim() != 3 || labels.dim() != 1 || images.size(0) != labels.size(0)) {
    throw std::runtime_error(images_path + " / " + labels_path +
                             ": expected N x H x W images and N labels");
  }
  if (labels.max().item<int64_t>() > 9) {
    throw std::runtime_error(labels_path + ": label above 9");
  }
  d.images = images.unsqueeze(1);
  d.labels = labels.to(at::kLong);
  d.num_classes = 10;
  return d;
}

Dataset cifar_split(const std::string& dir, const std::vector<std::string>& files, bool cifar100,
                    const std::string& name) {
  std::vector<at::Tensor> images, labels;
  for (const auto& f : files) {
    std::string path = dir + "/" + f;
    if (!exists(path)) {
      const std::string nested =
          dir + (cifar100 ? "/cifar-100-binary/" : "/cifar-10-batches-bin/") + f;
      if (!exists(nested)) throw std::runtime_error("missing " + path);
      path = nested;
    }
    auto [i, l] = read_cifar_batch(path, cifar100);
    images.push_back(i);
    labels.push_back(l);
  }
  Dataset d;
  d.name = name;
  d.images = at::cat(images);
  d.labels = at::cat(labels);
  d.num_classes = cifar100 ? 100 : 10;
  return d;
}

}  // namespace

std::string default_data_dir(const std::string& name) {
  if (name == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";
  return "data/" + name;
}

Splits load(const DataConfig& c) {
  const std::string dir = c.data_dir.empty() ? default_data_dir(c.name) : c.data_dir;
  Splits s;
  if (c.name == "fashion-mnist" || c.name == "mnist") {
    s.train = idx_split(dir, "train", c.name + "-train");
    s.test = idx_split(dir, "t10k", c.name + "-test");
    s.digit_like = true;
  } else if (c.name == "cifar10") {
    s.train = cifar_split(dir,
                          {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                           "data_batch_4.bin", "data_batch_5.bin"},
                          false, "cifar10-train");
    s.test = cifar_split(dir, {"test_batch.bin"}, false, "cifar10-test");
  } else if (c.name == "cifar100") {
    s.train = cifar_split(dir, {"train.bin"}, true, "cifar100-train");
    s.test = cifar_split(dir, {"test.bin"}, true, "cifar100-test");
  } else if (c.name == "synthetic") {
    s = make_synthetic(c);
  } else if (c.name == "glue") {
    s = load_glue(c);
  } else {
    throw std::invalid_argument("unknown dataset '" + c.name +
                                "' (fashion-mnist, mnist, cifar10, cifar100, synthetic, glue)");
  }
  return s;
}

}  // namespace dtrain::data
