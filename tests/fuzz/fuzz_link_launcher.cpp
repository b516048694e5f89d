// The launcher's end of an agent link fed what an agent (or anything pretending to be one: a
// login shell's greeting, a stale pmd, a hostile host) sends: the magic, the hello, messages and
// output frames. The launcher answers like job_runner: the job's setup and a spawn after the
// hello, acknowledgements for output, stdin for rank 0 while it has credit. Input layout:
// link_drive.hpp.
#include "link_drive.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pm::fuzz;
  namespace link = pm::link;
  const auto script = link_script::read(data, size);
  link::endpoint ep(link_options(link::role::launcher));
  ep.start(link::link_time{0}, link::hello{});

  const std::vector<std::uint8_t> stdin_bytes(300, 'i');
  const auto on_event = [&](link::link_time, link::link_event& e) {
    if (auto* g = std::get_if<link::peer_greeted>(&e)) {
      check(g->peer.nonce == link_nonce && g->peer.version == link::protocol_version,
            "greeted by a peer with another nonce or version");
      link::job_setup setup;
      setup.apps.push_back(link::app_spec{{"app"}, {}, {}});
      ep.send(setup);
      ep.send(link::spawn_request{{link::rank_spec{0, 0, {"RANK=0"}, true}}});
    } else if (auto* o = std::get_if<link::output_in>(&e)) {
      check(!o->bytes.empty(), "an empty output event");
      if (script.ack) ep.acknowledge(o->bytes.size());
    } else if (std::holds_alternative<link::input_in>(e)) {
      broken("stdin data reached the launcher's end");
    } else if (auto* m = std::get_if<link::message_in>(&e)) {
      // Messages either side sends (modex, modex_reply, ...) may come in too.
      check(link::sent_by(m->msg) != link::sender::launcher,
            "the launcher's end passed on a message only a launcher sends");
    }
  };
  const auto between = [&](link::link_time) {
    if (!script.send_data || !ep.greeted() || ep.down()) return;
    const auto n = std::min<std::uint64_t>(ep.credit(), stdin_bytes.size());
    if (n > 0) ep.send_input(0, std::span(stdin_bytes).first(n));
  };
  drive_link(ep, script, on_event, between);
  return 0;
}
