// dtrain._backend: the torch.distributed backend's constructor for Python
// (python/dtrain/__init__.py registers it as "dtrain"; backend.h has the contract).
#include <pybind11/chrono.h>
#include <torch/python.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dtrain/torch_backend/backend.h"

namespace py = pybind11;

PYBIND11_MODULE(_backend, m) {
  m.doc() = "dtrain's torch.distributed backend (registered as \"dtrain\" by `import dtrain`)";
  // torch calls it as creator(store, rank, world_size, timeout) for every process group.
  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::duration<float> timeout) {
        return dtrain::torch_backend::make_backend(
            store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
      },
      py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>());
  m.def("all_reduce_algorithm", &dtrain::torch_backend::all_reduce_algorithm, py::arg("backend"),
        "The all-reduce algorithm a dtrain backend runs (DTRAIN_ALGO's, or its default).");
}
