// Everything one host's agent decides, whole: the agent machine (its ranks: agent.hpp), the PMIx
// relay (its ranks' PMIx requests: pmix_relay.hpp) and the child relay (the tree launch's child
// agents: child_relay.hpp). Every launcher message comes in here and is routed to the parts that
// take it; what one part's event means for another (a signal releases a rank blocked in
// PMIx_Abort, a lost launcher ends the child agents, a rank that ends without PMIx_Finalize is
// reported) is decided here too.
//
// Sans-I/O like its parts: events in with the driver's time, actions out; no clock, no
// descriptor, no libpmix. pmd (libpm/tools/pmd) is its driver: it feeds every event of its loop
// here and carries out every action with a system call or a libpmix call. The simulator drives it
// the same way for each virtual host (sim/src/agent_side.cpp), a modelled PMIx server answering
// the pmix_* actions. The driver rules of agent.hpp hold.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent/agent.hpp"
#include "agent/child_relay.hpp"
#include "agent/pmix_relay.hpp"

namespace pm::agent {

// ---- events besides the parts' ----
/// The answer to start_pmix: where the server will be, and what the ranks' variables depend on.
struct pmix_ready {
  pmix_host_facts facts;
};
/// The answer to start_pmix when the driver cannot serve PMIx (no listening socket, ...): the
/// job cannot run as asked.
struct pmix_unavailable {
  std::string reason;
};

/// The driver handled every event that was ready (a turn of its loop is over): send what this
/// turn decided about ranks. What happens to ranks (started, exited, stream_closed) is held until
/// then, so that one message names every rank of the turn (link version 10); any other message,
/// and the agent's exit, sends what is held first, so the launcher sees everything in order.
struct turn_ended {};

/// The agent's own link timer was due (its heartbeat): the tree launch's children get theirs, and
/// a child silent for too long is ended (child_relay::tick). Only worth feeding while relays().
struct children_tick {};

using host_event = std::variant<event, pmix_event, child_event, pmix_ready, pmix_unavailable,
                                turn_ended, children_tick>;

// ---- actions besides the parts' ----
/// The job's ranks get PMIx: name the server's place (directories, a listening port; the server
/// itself starts when a rank connects) and answer pmix_ready or pmix_unavailable.
struct start_pmix {
  link::pmix_job job;
  std::vector<std::string> executables;  ///< each app's argv[0]
};
/// The launcher's heartbeat period and silence bound for the link, from the job's setup (0:
/// none).
struct set_heartbeats {
  std::chrono::milliseconds every{0};
  std::chrono::milliseconds silence{0};
};
/// The launcher's input for a rank ended: close its stdin pipe once what it holds is written.
struct close_input {
  std::uint32_t rank = 0;
};

/// Nothing receives this output stream of the rank any more (link::output_unwanted): close the
/// pipe's read end (the rank gets SIGPIPE at its next write) and report its end.
struct close_output {
  std::uint32_t rank = 0;
  output_stream stream = output_stream::out;
};

/// Every `send`, whichever part decided it, comes out as an `action` (agent.hpp): the driver
/// finds each message in one place.
using host_action = std::variant<action, pmix_action, child_action, start_pmix, set_heartbeats,
                                 close_input, close_output>;

class host_machine {
 public:
  explicit host_machine(options opts);
  ~host_machine();
  host_machine(host_machine&&) noexcept;
  host_machine& operator=(host_machine&&) noexcept;

  void handle(agent_time now, host_event e, std::vector<host_action>& out);
  /// True once exit_agent was emitted.
  bool done() const noexcept;
  /// True while reports wait for turn_ended (a driver may skip the event otherwise).
  bool holds_reports() const noexcept;
  /// True while it relays child agents (children_tick has something to do).
  bool relays() const noexcept;
  /// The PMIx part, once the driver said where the server will be (null: none).
  const pmix_relay* pmix() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace pm::agent
