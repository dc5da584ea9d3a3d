// `dtrain train`'s DiLoCo flags (docs/diloco.md), apart from the rest of train's options.
#pragma once

#include <CLI/CLI.hpp>

#include "dtrain/parallel/diloco.h"

namespace dtrain::cli {

// --sync-every, --outer-lr, --outer-momentum, --compress-outer (`outer_auto` set for
// "auto"), --fragments, --sync-delay, --ranks-per-replica, --merge-alpha.
void add_diloco_options(CLI::App* sub, parallel::DilocoConfig& lo, bool& outer_auto);

// Whether any of them differs from its default (they are refused outside diloco).
bool diloco_flags_set(const parallel::DilocoConfig& c);

}  // namespace dtrain::cli
