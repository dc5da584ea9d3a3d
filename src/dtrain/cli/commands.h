// One function per subcommand file: adds the subcommand to `parent` and, when it runs,
// stores its exit status in `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace dtrain::cli {

void register_launch(CLI::App& parent, int& exit_code);
void register_coordinator(CLI::App& parent, int& exit_code);
void register_netlab(CLI::App& parent, int& exit_code);
void register_codec(CLI::App& parent, int& exit_code);
void register_train(CLI::App& parent, int& exit_code);
void register_models(CLI::App& parent, int& exit_code);
void register_scale(CLI::App& parent, int& exit_code);
void register_report(CLI::App& parent, int& exit_code);
void register_bench_collective(CLI::App& bench, int& exit_code);
void register_bench_p2p(CLI::App& bench, int& exit_code);
void register_bench_codec(CLI::App& bench, int& exit_code);
void register_bench_syncbn(CLI::App& bench, int& exit_code);
void register_bench_checksum(CLI::App& bench, int& exit_code);

}  // namespace dtrain::cli
