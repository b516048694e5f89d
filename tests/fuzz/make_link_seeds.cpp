// Writes the seed corpora of the agent link targets (tests/fuzz/corpus/fuzz_link_*) from the
// real encoders, so that the seeds stay true to the protocol: regenerate them after a protocol
// change with
//   build-fuzz/fuzz/make_link_seeds tests/fuzz/corpus
// (docs/fuzzing.md). Each seed is a conversation as one side really sends it.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "link/endpoint.hpp"
#include "link_drive.hpp"

namespace {

namespace link = pm::link;
using bytes = std::vector<std::uint8_t>;

void write(const std::filesystem::path& dir, const std::string& name, const bytes& b) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

bytes take(link::endpoint& ep) {
  bytes b(ep.output().begin(), ep.output().end());
  ep.consume_output(b.size());
  return b;
}

// An endpoint of `self`'s role that has greeted its peer, so that it may send anything.
link::endpoint greeted(link::role self, const link::hello& mine) {
  link::endpoint ep(pm::fuzz::link_options(self));
  ep.start(link::link_time{0}, mine);
  link::endpoint peer(
      pm::fuzz::link_options(self == link::role::agent ? link::role::launcher : link::role::agent));
  peer.start(link::link_time{0}, link::hello{});
  std::vector<link::link_event> events;
  ep.received(link::link_time{0}, take(peer), events);
  return ep;
}

bytes with_header(std::uint8_t chunk, std::uint8_t step, std::uint8_t flags, const bytes& stream) {
  bytes b{chunk, step, flags};
  b.insert(b.end(), stream.begin(), stream.end());
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_link_seeds CORPUS_DIR\n");
    return 2;
  }
  const std::filesystem::path root = argv[1];

  link::hello agent_hello;
  agent_hello.pid = 4242;
  agent_hello.hostname = "node2";
  agent_hello.addrs = {"10.0.0.2", "fe80::1%eth0"};
  agent_hello.port = 29500;

  // A rank's MPI_Comm_spawn as its agent forwards it, and the job the launcher makes of it.
  const link::pmix_spawn spawn_ask{
      1,
      0,
      {link::spawn_app_spec{{"./child", "child"}, {"OMPI_PARENT_PORT=1.0:7"}, "/w", 2, {}}},
      ""};
  // A PMIx tool's spawn (rank 0 of its own namespace) as the agent forwards it.
  const link::pmix_spawn tool_spawn{
      5, 0, {link::spawn_app_spec{{"/bin/echo", "hi"}, {}, "", 2, {"node2"}}}, "pm-tool.4242.0"};
  link::job_add added{1,
                      3,
                      2,
                      {link::app_spec{{"./child", "child"}, "/w", {"OMPI_PARENT_PORT=1.0:7"}}},
                      std::nullopt};
  added.pmix =
      link::pmix_job{"pmrun.1.a.1", 4, 0, {"node2"}, {0, 0}, {0, 0}, {0, 1}, "pmrun.1.a", 0};

  // What an agent says: hello, a rank started, its output, its end, the shutdown.
  link::endpoint agent = greeted(link::role::agent, agent_hello);
  bytes from_agent = take(agent);
  agent.send(link::started{0, 1234});
  agent.send(link::started{1, 1235}, 0);
  const std::string line = "hello from rank 0\n";
  agent.send_output(0, pm::output_stream::out,
                    {reinterpret_cast<const std::uint8_t*>(line.data()), line.size()});
  agent.send_output(1, pm::output_stream::err, {reinterpret_cast<const std::uint8_t*>("oops"), 4});
  agent.send(link::ack{300});
  agent.send(link::heartbeat{});
  agent.send(link::stream_closed{0, pm::output_stream::out, line.size()});
  agent.send(link::exited{0, pm::exit_status::exited(0)});
  agent.send(link::exited{1, pm::exit_status::signaled(9)});
  agent.send(link::spawn_failed{2, 127, "cannot execute 'app': No such file or directory"});
  agent.suspend(link::link_time{0});
  agent.resume(link::link_time{0});
  agent.send(
      link::pmix_server{"pmix-server.4242;tcp4://127.0.0.1:40001", "/tmp/pm-pmix.4242.x/pmix"});
  agent.send(link::proc_table_request{1});
  agent.send(spawn_ask);
  agent.send(tool_spawn);
  agent.send(link::pmix_publish{2, 0, {link::published_entry{"p:accept", 0, "\x01\x02"}}});
  agent.send(link::pmix_lookup{3, 0, {"p:connect"}, true, 600});
  agent.send(link::pmix_unpublish{4, 0, {"p:accept"}});
  agent.send(link::shutdown_done{});
  agent.send(link::agent_error{"the agent received SIGTERM"});
  const bytes agent_talk = take(agent);
  from_agent.insert(from_agent.end(), agent_talk.begin(), agent_talk.end());

  // What a launcher says: hello, the job, spawns, stdin, signals, the shutdown.
  link::endpoint launcher = greeted(link::role::launcher, link::hello{});
  bytes from_launcher = take(launcher);
  link::job_setup setup;
  setup.host = 1;
  setup.heartbeat_ms = 100;
  setup.silence_ms = 1000;
  setup.cwd = "/home/u";
  setup.base = {"OMPI_MCA_btl=self"};
  setup.overrides = {"FOO=bar"};
  setup.apps = {link::app_spec{{"./app", "-v"}, "", {"A=1"}},
                link::app_spec{{"python3", "x.py"}, "/tmp", {}}};
  launcher.send(setup);
  launcher.send(link::spawn_request{{link::rank_spec{0, 0, {"RANK=0", "LOCAL_RANK=0"}, true},
                                     link::rank_spec{1, 1, {"RANK=1"}, false},
                                     link::rank_spec{2, 7, {}, false}}});
  launcher.send_input(0, {reinterpret_cast<const std::uint8_t*>("input\n"), 6});
  launcher.send(link::input_closed{0});
  launcher.send(link::ack{20});
  launcher.send(link::signal_request{{0, 1}, 15});
  launcher.send(link::signal_request{{1}, 0});
  launcher.send(added);
  launcher.send(link::spawn_request{
      {link::rank_spec{3, 2, {"RANK=0"}, false}, link::rank_spec{4, 2, {"RANK=1"}, false}}});
  launcher.send(link::pmix_spawn_reply{1, true, "pmrun.1.a.1", ""});
  launcher.send(link::pmix_data_reply{
      3, link::data_status::ok, {link::published_entry{"p:connect", 3, "\x05"}}});
  launcher.send(link::proc_table_reply{1,
                                       {link::proc_table_entry{0, 1234, "running", -1, 0},
                                        link::proc_table_entry{1, 1235, "exited", 0, 0},
                                        link::proc_table_entry{2, 0, "spawn_failed", 127, 0}}});
  launcher.suspend(link::link_time{0});
  launcher.resume(link::link_time{0});
  launcher.send(link::heartbeat{});
  launcher.send(link::shutdown_request{});
  const bytes launcher_talk = take(launcher);
  from_launcher.insert(from_launcher.end(), launcher_talk.begin(), launcher_talk.end());

  const std::string greeting = "Welcome to node2\nLast login: today\n";
  bytes noisy(greeting.begin(), greeting.end());
  const auto noisy_agent = [&] {
    bytes b = noisy;
    b.insert(b.end(), from_agent.begin(), from_agent.end());
    return b;
  }();

  // Launcher side (fed what the agent sends) and agent side (fed what the launcher sends), each
  // at once and in small chunks, with acks, data, suspends, and a late hello (silence).
  const auto sides = {std::pair{std::string("fuzz_link_launcher"), from_agent},
                      std::pair{std::string("fuzz_link_agent"), from_launcher}};
  for (const auto& [target, stream] : sides) {
    write(root / target, "whole", with_header(0, 0, 8, stream));
    write(root / target, "chunks_acked", with_header(7, 20, 1 | 2 | 8, stream));
    write(root / target, "bytewise_suspended", with_header(1, 1, 1 | 4 | 8, stream));
    write(root / target, "slow_broken", with_header(64, 250, 1 | 2, stream));
    write(root / target, "failing_spawns", with_header(16, 5, 1 | 2 | 8 | 16, stream));
  }
  write(root / "fuzz_link_launcher", "login_noise", with_header(5, 10, 9, noisy_agent));

  // Frames: noise, the magic and frames, whole or in chunks, with the real or a 1 KiB limit.
  write(root / "fuzz_link_frames", "agent_whole", [&] {
    bytes b{0};
    b.insert(b.end(), noisy_agent.begin(), noisy_agent.end());
    return b;
  }());
  write(root / "fuzz_link_frames", "launcher_chunks_small_limit", [&] {
    bytes b{0x80 | 3};
    b.insert(b.end(), from_launcher.begin(), from_launcher.end());
    return b;
  }());

  // Message bodies, one of each type.
  const link::message messages[] = {
      agent_hello,
      link::hello{},
      link::heartbeat{},
      link::ack{1ULL << 40},
      setup,
      link::spawn_request{{link::rank_spec{3, 0, {"RANK=3"}, false}}},
      link::signal_request{{0, 1, 2}, 9},
      link::input_closed{5},
      link::suspend{},
      link::resume{},
      link::shutdown_request{},
      link::started{7, -1},
      link::spawn_failed{1, 126, "cannot execute './x.sh': Permission denied"},
      link::exited{2, pm::exit_status::exited(7)},
      link::exited{2, pm::exit_status::signaled(15)},
      link::stream_closed{0, pm::output_stream::err, 12345},
      link::shutdown_done{},
      link::agent_error{"agent link: bad"},
      link::pmix_server{"pmix-server.7;tcp4://127.0.0.1:5", "/tmp/pm-pmix.7.a/pmix"},
      link::proc_table_request{1ULL << 40},
      link::proc_table_reply{9, {link::proc_table_entry{0, 77, "killed", -1, 15}}},
      link::pmix_notify{
          pm::notice_kind::rank_exited, {1}, 7, "node2", "rank 1 on node2 exited with code 7"},
      spawn_ask,
      added,
      link::pmix_spawn_reply{2, false, "", "not enough slots"},
      link::pmix_data_reply{3, link::data_status::timeout, {}},
      link::pmix_publish{4, 1, {link::published_entry{"k", 1, std::string("\0v", 2)}}},
      link::pmix_lookup{5, 1, {"k", "l"}, false, 0},
      link::pmix_unpublish{6, 1, {"k"}},
      link::pmix_notify{pm::notice_kind::rank_unfinalized,
                        {2},
                        0,
                        "node1",
                        "rank 2 on node1 exited with code 0 without calling MPI_Finalize"},
      tool_spawn,
  };
  int i = 0;
  for (const auto& m : messages) {
    write(root / "fuzz_link_message", std::to_string(i++) + "_" + std::string(link::type_name(m)),
          link::encode(m));
  }
  write(root / "fuzz_link_message", "spawn_with_fd",
        link::encode(link::spawn_request{{link::rank_spec{0, 0, {}, true}}}, 1));
  write(root / "fuzz_link_message", "started_with_fds", link::encode(link::started{0, 99}, 2));
  return 0;
}
