// The dtrain binary: wiring only; every subcommand lives in its own file.
#include <malloc.h>
#include <signal.h>

#include <cstdlib>

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>
#include <string>

#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/comm/failure_readers.h"
#include "dtrain/metrics/build_info.h"

namespace {

// How long a failed rank 0 keeps the store up for the others to read its error
// (failure_readers.h): they read within a second or so of its connections closing.
constexpr std::chrono::milliseconds kServeFailureReaders{3000};

// CLI11 takes a word that names no command for a stray argument: `dtrain diloco` said only
// "A subcommand is required", and `dtrain diloco --help` printed dtrain's help and exited 0.
// Where a level of commands needs one (dtrain, bench, codec, netlab), the first word after
// it must name one of that level's; options are left to CLI11. Returns the error, if any.
std::optional<std::string> unknown_command(const CLI::App& app, int argc, char** argv) {
  const CLI::App* level = &app;
  std::string path = "dtrain";
  for (int i = 1; i < argc && level->get_require_subcommand_min() > 0; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return std::nullopt;
    const CLI::App* next = nullptr;
    std::string names;
    for (const CLI::App* command :
         level->get_subcommands([](const CLI::App* a) { return !a->get_name().empty(); })) {
      if (command->get_name() == word) next = command;
      names += (names.empty() ? "" : ", ") + command->get_name();
    }
    if (next == nullptr)
      return "'" + word + "' is not a command of " + path + " (its commands: " + names + ")";
    level = next;
    path += " " + word;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);  // a dead peer's socket must become an error, not a silent exit
  // Keep large buffers (tensors, packets) in the heap instead of fresh mmaps: on VMs a
  // first-touch page fault costs microseconds, more than coding the page. Memory freed by
  // one step is reused by the next instead of being returned to the OS.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // LibTorch's own log lines (c10d's warnings among them: a peer's store gone, with a stack
  // trace) follow TORCH_CPP_LOG_LEVEL as under PyTorch, which reads it at import; a C++
  // program has to ask for it.
  c10::initLogging();
  // c10d's flight recorder (a ring of Gloo's recent operations, for a dump nobody here asks
  // for) adds each group to a map outside its lock in PyTorch 2.11: groups connecting beside
  // a group in use (elastic DiLoCo connects the next round's while training) could corrupt it.
  // Off unless the user set its size; read once, when the recorder is first used.
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
  dtrain::cli::set_program_args(argc, argv);

  CLI::App app{"dtrain: distributed training and measurement over real networks"};
  app.require_subcommand(1);
  app.set_version_flag(
      "--version", [] { return dtrain::metrics::describe(dtrain::metrics::build_info()); },
      "print dtrain's and LibTorch's versions, whether CUDA and NCCL are compiled in, and exit");
  int exit_code = 0;
  dtrain::cli::register_train(app, exit_code);
  dtrain::cli::register_models(app, exit_code);
  dtrain::cli::register_scale(app, exit_code);
  dtrain::cli::register_report(app, exit_code);
  dtrain::cli::register_launch(app, exit_code);
  dtrain::cli::register_coordinator(app, exit_code);
  dtrain::cli::register_netlab(app, exit_code);
  dtrain::cli::register_codec(app, exit_code);
  CLI::App* bench =
      app.add_subcommand("bench", "benchmarks: collective, p2p, codec, syncbn, checksum");
  bench->require_subcommand(1);
  dtrain::cli::register_bench_collective(*bench, exit_code);
  dtrain::cli::register_bench_p2p(*bench, exit_code);
  dtrain::cli::register_bench_codec(*bench, exit_code);
  dtrain::cli::register_bench_syncbn(*bench, exit_code);
  dtrain::cli::register_bench_checksum(*bench, exit_code);

  if (const auto unknown = unknown_command(app, argc, argv)) {
    std::cerr << "dtrain: error: " << *unknown << std::endl;
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const c10::Error& e) {  // LibTorch's own checks: keep the message, drop the trace
    std::cerr << "dtrain: error: " << e.what_without_backtrace() << std::endl;
    dtrain::comm::serve_failure_readers(kServeFailureReaders);
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "dtrain: error: " << e.what() << std::endl;
    dtrain::comm::serve_failure_readers(kServeFailureReaders);
    return 1;
  }
  return exit_code;
}
