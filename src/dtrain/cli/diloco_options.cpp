#include "dtrain/cli/diloco_options.h"

#include "dtrain/cli/common.h"
#include "dtrain/compress/codec.h"

namespace dtrain::cli {

void add_diloco_options(CLI::App* sub, parallel::DilocoConfig& lo, bool& outer_auto) {
  sub->add_option("--sync-every", lo.sync_every,
                  "diloco: H, inner optimizer steps between outer steps (each epoch's last step "
                  "also ends with one; one due fewer than H/2 steps before it waits for it)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  sub->add_option("--outer-lr", lo.outer_lr, "diloco: the outer optimizer's learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--outer-momentum", lo.outer_momentum,
                  "diloco: the outer optimizer's Nesterov momentum, in [0, 1)")
      ->check(CLI::Range(0.0, 0.999999))
      ->capture_default_str();
  add_typed_option(
      sub, "--compress-outer", lo.codec,
      [&outer_auto](const std::string& text) {
        outer_auto = text == "auto";
        return outer_auto ? compress::CodecSpec{} : compress::parse_codec(text);
      },
      "diloco: codec of the outer all-reduce of pseudo-gradients, with error feedback "
      "(default none: exact), or auto: at the first outer step, the least lossy candidate "
      "(--compress-candidates, --compress-min-bits) whose exchange the measured link and "
      "steps keep under 5 % of the training time, chosen again after 2 exchanges from "
      "their own times",
      "none");
  sub->add_option("--fragments", lo.fragments,
                  "diloco (streaming): F equal ranges of the parameters, fragment f exchanged "
                  "every --sync-every steps at offset f H / F (under --elastic: a round of "
                  "H / F steps a fragment)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--sync-delay", lo.sync_delay,
                  "diloco (streaming): inner steps each exchange runs beside, in the "
                  "background, before it is applied (0: it blocks; at most H, beyond H / F "
                  "several exchanges in flight at once; under --elastic at most H / F - 1: "
                  "beside its own round's last steps)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  sub->add_option("--ranks-per-replica", lo.ranks_per_replica,
                  "diloco: K ranks in each replica, training it as DDP does (--algo, "
                  "--bucket-mb); -n R*K runs R replicas; under --elastic a rank's death takes "
                  "its replica out, not the run")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--merge-alpha", lo.merge_alpha,
                  "diloco (streaming): with --sync-delay, weight of the replica's own "
                  "parameters when a delayed outer step lands")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
}

bool diloco_flags_set(const parallel::DilocoConfig& c) {
  const parallel::DilocoConfig defaults;
  return c.sync_every != defaults.sync_every || c.outer_lr != defaults.outer_lr ||
         c.outer_momentum != defaults.outer_momentum || c.codec != defaults.codec ||
         c.fragments != defaults.fragments || c.sync_delay != defaults.sync_delay ||
         c.merge_alpha != defaults.merge_alpha ||
         c.ranks_per_replica != defaults.ranks_per_replica || c.auto_codec.has_value();
}

}  // namespace dtrain::cli
