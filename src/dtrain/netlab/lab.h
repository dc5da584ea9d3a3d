// Making a lab real (spec.h, plan.h): runs the commands as root, remembers each lab in a
// state file so `launch --netlab` can place ranks on its hosts, and removes everything on
// `down` -- or at once when `up` fails or is interrupted half-way, so no half-built lab is
// ever left behind.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "dtrain/netlab/plan.h"
#include "dtrain/netlab/spec.h"

namespace dtrain::netlab {

struct LabState {
  LabSpec spec;
  std::vector<std::string> host_namespaces;  // index: host
  std::vector<std::string> addresses;        // index: host
  // How delay and loss are made, chosen when first asked for (netem where the kernel has
  // it; DTRAIN_NETLAB_IMPAIR=netem|nfqueue forces one), then kept for the lab's life.
  std::optional<Impairment> impairment;
  pid_t impairer_pid = 0;  // the running impairer (kNfqueue with delay or loss), else 0
};

// "netem" or "nfqueue", as the state file and `netlab list` spell it.
std::string impairment_name(Impairment how);

// Throws std::runtime_error saying why a lab cannot be made here: not root, or no `ip`/`tc`.
void require_lab_support();

// Builds and shapes the lab; throws (having removed whatever it made) when a name is taken,
// a command fails (the error quotes it), or SIGINT/SIGTERM arrives while building.
LabState bring_up(const LabSpec& spec);
// Removes every namespace named after the lab and its state file. Throws when there is
// nothing of that name.
void tear_down(const std::string& name);
// Changes the shaping of a running lab (rate, uplink, delay, loss) and writes its host
// settings, in place. A refused change puts the old shaping back; host settings written
// before a refused one stay.
LabState reshape(LabSpec spec);
// Takes host k's cable out (up = false) or puts it back.
void set_link(const std::string& name, int host, bool up);

// The lab's state; throws "no lab named X" when it is not up.
LabState load(const std::string& name);
std::vector<LabState> list_labs();

// Where state files live: $DTRAIN_NETLAB_DIR, else /run/dtrain/netlab.
std::string state_dir();
// The file `ip netns` binds a namespace to (what setns(2) opens).
std::string namespace_path(const std::string& ns);

}  // namespace dtrain::netlab
