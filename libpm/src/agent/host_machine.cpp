#include "agent/host_machine.hpp"

#include <utility>

#include "model/overloaded.hpp"
#include "pm/error.hpp"
#include "pm/topology.hpp"

namespace pm::agent {

namespace {

bool pmix_message(const link::message& m) {
  return std::holds_alternative<link::fence_result>(m) ||
         std::holds_alternative<link::modex_request>(m) ||
         std::holds_alternative<link::modex_reply>(m) ||
         std::holds_alternative<link::proc_table_reply>(m) ||
         std::holds_alternative<link::pmix_notify>(m) ||
         std::holds_alternative<link::pmix_spawn_reply>(m) ||
         std::holds_alternative<link::pmix_data_reply>(m);
}

// The parts' actions on their way out: kept per thread, not per host (an action is 328 bytes,
// and a host's agent step may produce a dozen: 100,000 simulated hosts kept 0.5 GB of them).
struct scratch {
  std::vector<action> agent_out;
  std::vector<pmix_action> pmix_out;
  std::vector<child_action> child_out;
};
thread_local scratch spare;

}  // namespace

struct host_machine::state {
  explicit state(options o) : ranks(std::move(o)) {}

  agent ranks;
  // Behind pointers: most hosts of a big launch have neither (a relay is 880 bytes).
  std::unique_ptr<pmix_relay> pmix;
  std::unique_ptr<start_pmix> pmix_asked;  // until the driver answers
  // Behind a pointer too: only a tree parent has children (a host in 32 of a tree launch; the
  // relay is 88 bytes), made at the first child message. Ending the children before there is a
  // relay is remembered (its first time), so that a relay made later acts as one made earlier.
  std::unique_ptr<child_relay> children;
  std::optional<agent_time> children_ended;
  bool finished = false;  // ranks.done(), kept here: a relayed piece need not touch the agent
  agent_time now{0};
  std::vector<host_action>* out = nullptr;
  scratch* buf = nullptr;  // the parts' actions, during handle() only
  // This turn's reports about ranks, until turn_ended (or another message) sends them.
  link::started started_held;
  link::stream_closed closed_held;
  link::exited exited_held;
  // The summary this agent sent has GPUs (the ones the launcher hands out): the PMIx relay's
  // facts say so even where the driver's cheap look finds no device (a fake HWLOC_XMLFILE host).
  bool shape_has_gpus = false;
  // The PMIx facts of the incarnation a restart gets ready for, until the agent forgets the
  // ranks before it (forget_ranks): the relay then serves that namespace alone.
  std::optional<link::pmix_job> restart_pmix;

  bool holds() const noexcept {
    return !started_held.ranks.empty() || !closed_held.streams.empty() ||
           !exited_held.ranks.empty();
  }
  // Ranks start before anything else happens to them; a stream's end and its rank's exit come
  // in either order (they do on a real host too).
  void send_held() {
    if (!started_held.ranks.empty()) out->push_back(action{send{std::exchange(started_held, {})}});
    if (!closed_held.streams.empty()) out->push_back(action{send{std::exchange(closed_held, {})}});
    if (!exited_held.ranks.empty()) out->push_back(action{send{std::exchange(exited_held, {})}});
  }
  // Every action leaves through here. A report about ranks is held; another message (a relayed
  // child's bytes aside: they are another host's) and the agent's exit send the held ones first.
  void emit(host_action&& a) {
    if (auto* x = std::get_if<action>(&a)) {
      if (auto* s = std::get_if<send>(x)) {
        if (hold(s->msg)) return;
        if (const auto* shape = std::get_if<link::host_shape>(&s->msg)) note_shape(*shape);
        if (!std::holds_alternative<link::child_data>(s->msg)) send_held();
      } else if (std::holds_alternative<exit_agent>(*x)) {
        send_held();
      }
    }
    out->push_back(std::move(a));
  }
  void note_shape(const link::host_shape& shape) {
    if (shape.text.empty()) return;
    try {
      shape_has_gpus = !topo::topology_from_text(shape.text).gpus.empty();
    } catch (const pm::error&) {  // the launcher refuses it; nothing to tell the ranks
    }
  }
  bool hold(link::message& m) {
    if (auto* s = std::get_if<link::started>(&m)) {
      append(started_held.ranks, s->ranks);
    } else if (auto* c = std::get_if<link::stream_closed>(&m)) {
      append(closed_held.streams, c->streams);
    } else if (auto* x = std::get_if<link::exited>(&m)) {
      append(exited_held.ranks, x->ranks);
    } else {
      return false;
    }
    return true;
  }
  template <class T>
  static void append(std::vector<T>& to, std::vector<T>& from) {
    if (to.empty()) {
      to.swap(from);
    } else {
      to.insert(to.end(), from.begin(), from.end());
    }
  }

  // A part's send is an agent action like the machine's own.
  template <class Part>
  void take(std::vector<Part>& actions) {
    for (auto& a : actions) {
      if (auto* s = std::get_if<send>(&a)) {
        emit(action{std::move(*s)});
      } else {
        emit(std::move(a));
      }
    }
    actions.clear();
  }
  void take_pmix() { take(buf->pmix_out); }
  void take_children() { take(buf->child_out); }
  child_relay& relay() {
    if (!children) {
      children = std::make_unique<child_relay>();
      // It has no children yet: this only starts its grace where the first end_all did.
      if (children_ended) children->end_all(*children_ended, buf->child_out);
    }
    return *children;
  }
  void end_children() {
    if (children) {
      children->end_all(now, buf->child_out);
      take_children();
    } else if (!children_ended) {
      children_ended = now;
    }
  }
  static bool child_message(const link::message& m) {
    return std::holds_alternative<link::child_open>(m) ||
           std::holds_alternative<link::child_data>(m) ||
           std::holds_alternative<link::child_close>(m);
  }

  void feed_agent(event e) {
    buf->agent_out.clear();
    ranks.handle(now, std::move(e), buf->agent_out);
    finished = ranks.done();
    for (auto& a : buf->agent_out) {
      if (auto* s = std::get_if<spawn_rank>(&a); s && pmix) {
        const auto& spec = s->spec;
        s->spec.pmix = pmix->rank_variables(spec.rank, [&](std::string_view name) {
          return spec.variable(name).has_value();  // set, even empty: the user's choice
        });
      }
      if (std::holds_alternative<forget_ranks>(a)) restart_pmix_jobs();
      if (const auto* f = std::get_if<forget_rank>(&a); f && pmix) {
        pmix->rank_respawned(f->rank, buf->pmix_out);
        take_pmix();
      }
      if (std::holds_alternative<sweep>(a)) {
        // Child agents' carriers end by themselves once their stdin is closed (their agents
        // clear their own ranks first); the sweep comes back until they have.
        end_children();
      }
      emit(std::move(a));
    }
    buf->agent_out.clear();
  }

  // A restart is complete: the jobs the relay served go (every request of theirs fails, the
  // driver deregisters their namespaces) and the new incarnation's namespace comes.
  void restart_pmix_jobs() {
    if (!restart_pmix) return;
    if (pmix) {
      pmix->restart(std::move(*restart_pmix), buf->pmix_out);
      take_pmix();
    } else if (pmix_asked) {  // the driver has not said where the server is yet
      pmix_asked->job = std::move(*restart_pmix);
    }
    restart_pmix.reset();
  }

  void on_message(link::message m) {
    if (child_message(m)) {
      relay().on_message(m, buf->child_out);
      take_children();
      return;
    }
    // The PMIx side's messages are the relay's alone; without a server here nobody has the
    // data a modex request asks for, and the rest has nobody to complete.
    if (pmix_message(m)) {
      if (pmix) {
        pmix->on_message(m, buf->pmix_out);
        take_pmix();
      } else if (const auto* q = std::get_if<link::modex_request>(&m)) {
        emit(action{send{link::modex_reply{q->id, false, {}}}});
      }
      return;
    }
    std::visit(
        overloaded{
            [&](link::job_setup& j) {
              // The launcher's heartbeats and silence bound, from now on (remote hosts).
              out->push_back(set_heartbeats{std::chrono::milliseconds(j.heartbeat_ms),
                                            std::chrono::milliseconds(j.silence_ms)});
              if (j.pmix && !pmix && !pmix_asked) {
                start_pmix s{*j.pmix, {}};
                for (const auto& app : j.apps) {
                  s.executables.push_back(app.argv.empty() ? std::string() : app.argv.front());
                }
                pmix_asked = std::make_unique<start_pmix>(s);
                out->push_back(std::move(s));
              }
            },
            // A spawned job: its namespace first (its ranks' spawn requests follow), then its
            // apps.
            [&](const link::job_add& j) {
              if (pmix) {
                pmix->add_job(j, buf->pmix_out);
                take_pmix();
              }
            },
            [&](const link::shutdown_request&) {
              if (pmix) {
                pmix->release_aborts(buf->pmix_out);
                take_pmix();
              }
            },
            // The ranks are about to be killed: one blocked in PMIx_Abort may return first.
            [&](const link::restart_request& r) {
              if (pmix) {
                pmix->release_aborts(buf->pmix_out);
                take_pmix();
              }
              restart_pmix = r.pmix;
            },
            [&](const link::input_closed& c) { out->push_back(close_input{c.rank}); },
            [&](const link::output_unwanted& c) {
              out->push_back(close_output{c.rank, c.stream});
            },
            [&](const auto&) {},
        },
        m);
    // The job is being stopped: a rank blocked in PMIx_Abort may return once signalled.
    std::vector<std::uint32_t> signalled;
    if (const auto* s = std::get_if<link::signal_request>(&m); s && pmix) signalled = s->ranks;
    feed_agent(received{std::move(m)});
    if (pmix && !signalled.empty()) {
      for (const auto r : signalled) pmix->release_abort(r, buf->pmix_out);
      take_pmix();
    }
  }

  void on_agent_event(event e) {
    std::visit(overloaded{
                   [&](received& r) { on_message(std::move(r.msg)); },
                   [&](rank_spawned& s) {
                     if (pmix) pmix->rank_started(s.rank, s.pid);
                     feed_agent(std::move(s));
                   },
                   [&](rank_exited& x) {
                     if (pmix) {
                       pmix->rank_ended(x.rank, x.status, buf->pmix_out);
                       take_pmix();
                     }
                     feed_agent(std::move(x));
                   },
                   [&](channel_lost& c) {
                     if (pmix) {
                       pmix->release_aborts(buf->pmix_out);
                       take_pmix();
                     }
                     // Their agents see their launcher gone too.
                     end_children();
                     feed_agent(std::move(c));
                   },
                   [&](auto& other) { feed_agent(std::move(other)); },
               },
               e);
  }

  void on(host_event& e) {
    std::visit(overloaded{
                   [&](event& a) { on_agent_event(std::move(a)); },
                   [&](pmix_event& p) {
                     if (!pmix) return;
                     const bool was_serving = pmix->server_running();
                     const bool fails = std::holds_alternative<pmix_server_failed>(p);
                     pmix->handle(std::move(p), buf->pmix_out);
                     take_pmix();
                     // The server went while the job ran: ranks that connect next would find
                     // its port free for anyone to listen on, and the connected ones lost it.
                     // The job cannot go on here: the agent ends its ranks and says why. Unless
                     // every rank still running here is past PMIx_Finalize (it needs no server).
                     const auto needs_server = [&](std::uint32_t r) { return !pmix->finalized(r); };
                     if (was_serving && fails && ranks.any_live_rank(needs_server)) {
                       feed_agent(bad_message{"its PMIx server ended while the job ran"});
                     }
                   },
                   [&](child_event& c) {
                     relay().handle(now, std::move(c), buf->child_out);
                     take_children();
                   },
                   [&](children_tick&) {
                     // The link's heartbeat period and silence bound (the job's setup).
                     const auto* setup = ranks.setup();
                     if (!children || setup == nullptr) return;
                     children->tick(now, std::chrono::milliseconds(setup->heartbeat_ms),
                                    std::chrono::milliseconds(setup->silence_ms), buf->child_out);
                     take_children();
                   },
                   [&](pmix_ready& r) {
                     if (!pmix_asked || pmix) return;
                     // The topology answer went out while the job message was handled, before
                     // the driver could answer start_pmix.
                     r.facts.gpus = r.facts.gpus || shape_has_gpus;
                     pmix = std::make_unique<pmix_relay>(std::move(pmix_asked->job),
                                                         std::move(pmix_asked->executables),
                                                         std::move(r.facts));
                     pmix_asked.reset();
                     // `pmrun --ps` shows tools where to attach.
                     emit(action{send{pmix->server_info()}});
                   },
                   [&](pmix_unavailable& u) {
                     pmix_asked.reset();
                     feed_agent(bad_message{std::move(u.reason)});
                   },
                   [&](turn_ended&) { send_held(); },
               },
               e);
  }
};

host_machine::host_machine(options opts) : state_(std::make_unique<state>(std::move(opts))) {}
host_machine::~host_machine() = default;
host_machine::host_machine(host_machine&&) noexcept = default;
host_machine& host_machine::operator=(host_machine&&) noexcept = default;

void host_machine::handle(agent_time now, host_event e, std::vector<host_action>& out) {
  if (state_->finished) return;
  state_->now = now;
  state_->out = &out;
  scratch buf = std::move(spare);  // (a second machine's handle() would find its own)
  state_->buf = &buf;
  state_->on(e);
  state_->buf = nullptr;
  state_->out = nullptr;
  buf.agent_out.clear();
  buf.pmix_out.clear();
  buf.child_out.clear();
  spare = std::move(buf);
}

bool host_machine::done() const noexcept {
  return state_->finished;
}

bool host_machine::holds_reports() const noexcept {
  return state_->holds();
}

bool host_machine::relays() const noexcept {
  return state_->children && !state_->children->empty();
}

const pmix_relay* host_machine::pmix() const noexcept {
  return state_->pmix.get();
}

}  // namespace pm::agent
