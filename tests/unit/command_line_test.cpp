// pmrun's command line: mpirun spellings (Open MPI 4 and 5), MPMD, and every bad input's message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "pm/command_line.hpp"
#include "pm/error.hpp"

namespace {

pm::run_options parse(std::vector<std::string> args) {
  return pm::parse_command_line(args);
}

std::string usage_error(std::vector<std::string> args) {
  try {
    pm::parse_command_line(args);
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::usage);
    return e.what();
  }
  return "no error";
}

TEST(CommandLine, TheCloudDocsLineWithOutputFiles) {
  auto o = parse({"-n", "8", "--output-filename", "log_output", "--merge-stderr-to-stdout",
                  "python", "net.py"});
  ASSERT_EQ(o.job.apps.size(), 1u);
  EXPECT_EQ(o.job.apps[0].np, 8u);
  EXPECT_EQ(o.job.apps[0].argv, (std::vector<std::string>{"python", "net.py"}));
  EXPECT_EQ(o.output_dir, "log_output");
  EXPECT_FALSE(o.output_nocopy);
  EXPECT_TRUE(o.merge_stderr);
}

TEST(CommandLine, TheCloudDocsLineWithMapAndExports) {
  auto o = parse({"--host", "localhost:6", "-np", "6", "--display-map", "--tag-output", "-bind-to",
                  "none", "-map-by", "slot", "-x", "VAR", "-mca", "orte_abort_on_non_zero_status",
                  "1", "prog"});
  EXPECT_EQ(o.host_lists, (std::vector<std::string>{"localhost:6"}));
  EXPECT_EQ(o.job.apps[0].np, 6u);
  EXPECT_TRUE(o.display_map);
  EXPECT_TRUE(o.tag_output);
  EXPECT_EQ(o.job.mapping.by, pm::map_by::slot);
  EXPECT_EQ(o.exports.x, (std::vector<std::string>{"VAR"}));
  // mpirun passes every -mca on, also the keys it reads itself.
  EXPECT_EQ(
      o.exports.mca,
      (std::vector<std::pair<std::string, std::string>>{{"orte_abort_on_non_zero_status", "1"}}));
  EXPECT_TRUE(o.abort_on_failure);
  EXPECT_EQ(o.job.apps[0].argv, (std::vector<std::string>{"prog"}));
}

TEST(CommandLine, ProgramArgumentsAreNotPmrunOptions) {
  auto o = parse({"-np", "2", "prog", "-np", "5", "--bogus"});
  EXPECT_EQ(o.job.apps[0].np, 2u);
  EXPECT_EQ(o.job.apps[0].argv, (std::vector<std::string>{"prog", "-np", "5", "--bogus"}));
  auto dashdash = parse({"-np", "1", "--", "-weird-program"});
  EXPECT_EQ(dashdash.job.apps[0].argv, (std::vector<std::string>{"-weird-program"}));
}

TEST(CommandLine, MpmdSegments) {
  auto o = parse({"--map-by", "node", "-np", "1", "-wdir", "/tmp", "a", "x", ":", "-np", "4", "-H",
                  "n1,n2", "b"});
  ASSERT_EQ(o.job.apps.size(), 2u);
  EXPECT_EQ(o.job.apps[0].np, 1u);
  EXPECT_EQ(o.job.apps[0].wdir, "/tmp");
  EXPECT_EQ(o.job.apps[0].argv, (std::vector<std::string>{"a", "x"}));
  EXPECT_TRUE(o.job.apps[0].hosts.empty());
  EXPECT_EQ(o.job.apps[1].np, 4u);
  EXPECT_EQ(o.job.apps[1].hosts, (std::vector<std::string>{"n1,n2"}));
  EXPECT_EQ(o.job.apps[1].wdir, "");
  EXPECT_EQ(o.job.mapping.by, pm::map_by::node);
}

TEST(CommandLine, MappingSpellings) {
  EXPECT_EQ(parse({"--map-by", "ppr:2:node", "a"}).job.mapping.ppr, 2u);
  EXPECT_EQ(parse({"--map-by", "ppr:2:node", "a"}).job.mapping.by, pm::map_by::ppr_node);
  EXPECT_EQ(parse({"--map-by", "node:OVERSUBSCRIBE", "a"}).job.mapping.oversubscribe, true);
  EXPECT_EQ(parse({"--map-by", ":oversubscribe", "a"}).job.mapping.oversubscribe, true);
  EXPECT_EQ(parse({"--map-by=slot:NOOVERSUBSCRIBE", "a"}).job.mapping.oversubscribe, false);
  EXPECT_EQ(parse({"--oversubscribe", "a"}).job.mapping.oversubscribe, true);
  EXPECT_EQ(parse({"-nooversubscribe", "a"}).job.mapping.oversubscribe, false);
  EXPECT_EQ(parse({"a"}).job.mapping.oversubscribe, std::nullopt);
  EXPECT_NO_THROW(parse({"--bind-to", "NONE", "a"}));
}

TEST(CommandLine, OpenMpi5Spellings) {
  auto o = parse({"--output", "tag,timestamp,merge-stderr-to-stdout,dir=out:nocopy", "-mca",
                  "plm_rsh_agent", "ssh -F cfg", "--mca", "plm_ssh_args", "-q", "a"});
  EXPECT_TRUE(o.tag_output);
  EXPECT_TRUE(o.timestamp_output);
  EXPECT_TRUE(o.merge_stderr);
  EXPECT_EQ(o.output_dir, "out");
  EXPECT_TRUE(o.output_nocopy);
  EXPECT_EQ(o.launcher_mca, (std::vector<std::pair<std::string, std::string>>{
                                {"plm_ssh_agent", "ssh -F cfg"}, {"plm_ssh_args", "-q"}}));
  EXPECT_EQ(o.remote.rsh_agent, (std::vector<std::string>{"ssh", "-F", "cfg"}));
  EXPECT_EQ(o.remote.rsh_args, (std::vector<std::string>{"-q"}));
  // ... and the ranks get them as written, as with mpirun.
  EXPECT_EQ(o.exports.mca, (std::vector<std::pair<std::string, std::string>>{
                               {"plm_rsh_agent", "ssh -F cfg"}, {"plm_ssh_args", "-q"}}));
}

TEST(CommandLine, McaKeys) {
  auto o = parse({"-mca", "btl", "self,tcp", "--mca", "orte_abort_on_non_zero_status", "0", "-gmca",
                  "pml", "ob1", "a"});
  EXPECT_FALSE(o.abort_on_failure);
  EXPECT_EQ(o.exports.mca,
            (std::vector<std::pair<std::string, std::string>>{
                {"btl", "self,tcp"}, {"orte_abort_on_non_zero_status", "0"}, {"pml", "ob1"}}));
  EXPECT_FALSE(parse({"--no-abort-on-failure", "a"}).abort_on_failure);
}

TEST(CommandLine, FailureAndStdinOptions) {
  auto o =
      parse({"--timeout", "2.5", "--kill-grace", "0", "--report", "r.json", "--stdin", "all", "a"});
  EXPECT_EQ(o.timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(o.kill_grace, std::chrono::milliseconds(0));
  EXPECT_EQ(o.report_file, "r.json");
  EXPECT_EQ(o.input.kind, pm::stdin_target::all);
  EXPECT_EQ(parse({"--stdin", "3", "a"}).input, (pm::stdin_target{pm::stdin_target::rank, 3}));
  EXPECT_EQ(parse({"--stdin", "none", "a"}).input.kind, pm::stdin_target::none);
  EXPECT_EQ(parse({"a"}).input, (pm::stdin_target{pm::stdin_target::rank, 0}));
}

// --stall-timeout (docs/resilience.md, "Stalls"): seconds as --timeout reads them; 0, a negative
// number or garbage is one line.
TEST(CommandLine, StallTimeout) {
  EXPECT_EQ(parse({"a"}).stall_timeout, std::chrono::milliseconds(0));
  EXPECT_EQ(parse({"--stall-timeout", "5", "a"}).stall_timeout, std::chrono::milliseconds(5000));
  EXPECT_EQ(parse({"--stall-timeout=0.25", "a"}).stall_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(parse({"-stall-timeout", "2", "a"}).stall_timeout, std::chrono::milliseconds(2000));
  EXPECT_EQ(usage_error({"--stall-timeout", "0", "a"}),
            "--stall-timeout '0': expected a positive number of seconds");
  EXPECT_EQ(usage_error({"--stall-timeout", "-1", "a"}),
            "--stall-timeout '-1': expected a positive number of seconds");
  EXPECT_EQ(usage_error({"--stall-timeout", "soon", "a"}),
            "--stall-timeout 'soon': expected a positive number of seconds");
}

// --no-spares changes something only with whole-job restarts; anywhere else it is refused, as
// --min-hosts without --max-restarts is.
TEST(CommandLine, NoSparesGoesWithWholeJobRestarts) {
  EXPECT_FALSE(parse({"--max-restarts", "2", "--no-spares", "a"}).spares);
  EXPECT_TRUE(parse({"--max-restarts", "2", "a"}).spares);
  EXPECT_EQ(usage_error({"--no-spares", "a"}),
            "--no-spares needs --max-restarts: hosts the map leaves empty get an agent only when "
            "the whole job may restart");
  EXPECT_EQ(usage_error({"--max-restarts", "2", "--enable-recovery", "--no-spares", "a"}),
            "--no-spares goes with whole-job restarts; --enable-recovery restarts single ranks "
            "where they ran, never on a spare");
}

TEST(CommandLine, HelpAndVersionNeedNoProgram) {
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_TRUE(parse({"-V"}).version);
}

TEST(CommandLine, BadInputGetsOneClearLine) {
  EXPECT_EQ(usage_error({"-np", "0", "a"}), "-np 0: at least one rank is needed");
  EXPECT_EQ(usage_error({"-np", "abc", "a"}), "-np 'abc': not a number");
  EXPECT_EQ(usage_error({"-np", "-3", "a"}), "-np '-3': not a number");
  EXPECT_EQ(usage_error({"-np", "99999999999", "a"}),
            "-np '99999999999': out of range (0..100000000)");
  EXPECT_EQ(usage_error({"-np"}), "-np: missing value (expected N)");
  EXPECT_EQ(usage_error({"--bogus", "a"}),
            "unknown option '--bogus' (pmrun --help lists the options)");
  EXPECT_EQ(usage_error({"-np", "2"}),
            "no program to run (usage: pmrun [OPTIONS] PROGRAM [ARGS...])");
  EXPECT_EQ(usage_error({"-np", "1", "a", ":"}), "MPMD segment 2 has no program to run");
  EXPECT_EQ(usage_error({"-np", "1", "a", ":", "-np", "2"}),
            "MPMD segment 2 has no program to run");
  EXPECT_EQ(usage_error({"--bind-to", "corez", "a"}),
            "--bind-to corez: unknown object 'corez' (none, hwthread, core, l3cache, numa, "
            "package)");
  EXPECT_EQ(usage_error({"--map-by", "sockets", "a"}),
            "--map-by sockets: unknown policy 'sockets' (slot, node, core, hwthread, l3cache, "
            "numa, package, ppr:N:OBJECT)");
  EXPECT_EQ(usage_error({"--map-by", "ppr:x:node", "a"}),
            "--map-by ppr:x:node: the N of ppr:N:OBJECT must be a positive number, not 'x'");
  EXPECT_EQ(usage_error({"--map-by", "ppr:2:board", "a"}),
            "--map-by ppr:2:board: unknown object 'board' (hwthread, core, l3cache, numa, "
            "package, node)");
  EXPECT_EQ(usage_error({"--map-by", "node:FOO", "a"}),
            "--map-by node:FOO: unknown modifier 'foo' (pe=M, oversubscribe, nooversubscribe)");
  EXPECT_EQ(usage_error({"--map-by", "slot:PE=0", "a"}),
            "--map-by slot:PE=0: pe must be a positive number, not '0'");
  EXPECT_EQ(usage_error({"--gpus-per-rank", "0", "a"}).substr(0, 18), "--gpus-per-rank 0:");
  EXPECT_EQ(usage_error({"--cpus-per-rank", "x", "a"}).substr(0, 18), "--cpus-per-rank x:");
  EXPECT_EQ(usage_error({"--timeout", "soon", "a"}),
            "--timeout 'soon': expected a positive number of seconds");
  EXPECT_EQ(usage_error({"--timeout", "100000000", "a"}),
            "--timeout '100000000': at most 366 days (31622400 seconds)");
  EXPECT_EQ(usage_error({"--timeout", "0", "a"}),
            "--timeout '0': expected a positive number of seconds");
  EXPECT_EQ(usage_error({"-mca", "orte_abort_on_non_zero_status", "maybe", "a"}),
            "-mca orte_abort_on_non_zero_status 'maybe': expected a boolean (1, 0, true, false, "
            "yes or no)");
  EXPECT_EQ(usage_error({"-mca", "btl"}), "-mca: missing value (expected KEY VALUE)");
  EXPECT_EQ(usage_error({"--output", "fancy", "a"}),
            "--output: unknown output mode 'fancy' (tag, timestamp, merge-stderr-to-stdout, "
            "json-lines, dir=DIR)");
  EXPECT_EQ(usage_error({"--master-port", "70000", "a"}),
            "--master-port '70000': out of range (1..65535)");
  EXPECT_EQ(usage_error({"--tag-output=yes", "a"}), "--tag-output takes no value with '='");
  EXPECT_EQ(usage_error({"-H", "", "a"}), "-H: empty value");
  EXPECT_EQ(usage_error({"--map-by", "", "a"}), "--map-by: empty value");  // was slot, silently
  EXPECT_EQ(usage_error({"--cpus-per-rank", "2", "--map-by", "core:pe=1", "a"}),
            "--cpus-per-rank 2 and --map-by ...:pe=1 ask different numbers of cpus per rank: "
            "give one");
  EXPECT_EQ(parse({"--cpus-per-rank", "2", "--map-by", "core:pe=2", "a"}).job.mapping.host.map.pe,
            2u);
  EXPECT_EQ(usage_error({"-np", "1", "--ps"}),
            "--ps lists jobs and goes first: pmrun --ps [--dvm-uri URI]");
  EXPECT_EQ(usage_error({"--hostfile", "a", "--hostfile", "b", "x"}),
            "--hostfile 'b': a hostfile was already given ('a')");
}

TEST(CommandLine, RemoteDefaults) {
  const auto o = parse({"a"});
  EXPECT_TRUE(o.remote.rsh_agent.empty());  // not given: resolve_remote_options decides
  EXPECT_FALSE(o.remote.rsh_args.has_value());
  EXPECT_FALSE(o.remote.launch_agent.has_value());
  EXPECT_FALSE(o.remote.prefix.has_value());
  EXPECT_TRUE(o.remote.interfaces.empty());
  EXPECT_EQ(o.remote.heartbeat_interval, std::chrono::milliseconds(500));
  EXPECT_EQ(o.remote.heartbeat_misses, 4u);
  // A silent host is noticed within 3 s by default.
  EXPECT_LE(o.remote.heartbeat_interval * o.remote.heartbeat_misses, std::chrono::seconds(3));
  EXPECT_EQ(o.remote.launch, pm::launch_shape::automatic);
  EXPECT_EQ(o.remote.tree_fanout, 32u);
  EXPECT_EQ(o.remote.max_ssh, 32u);
}

TEST(CommandLine, RshAgentSpellings) {
  const std::vector<std::string> words{"ssh", "-F", "/a b/cfg", "-x"};
  EXPECT_EQ(parse({"-mca", "plm_rsh_agent", "ssh -F '/a b/cfg' -x", "a"}).remote.rsh_agent, words);
  EXPECT_EQ(parse({"--mca", "plm_ssh_agent", "ssh -F \"/a b/cfg\" -x", "a"}).remote.rsh_agent,
            words);
  EXPECT_EQ(parse({"-gmca", "plm_rsh_agent", "ssh -F /a\\ b/cfg -x", "a"}).remote.rsh_agent, words);
  EXPECT_EQ(parse({"-mca", "orte_rsh_agent", "rsh", "a"}).remote.rsh_agent,
            (std::vector<std::string>{"rsh"}));
  // The last one given wins.
  EXPECT_EQ(parse({"-mca", "plm_rsh_agent", "rsh", "--mca", "plm_ssh_agent", "ssh", "a"})
                .remote.rsh_agent,
            (std::vector<std::string>{"ssh"}));
  const auto args = parse({"-mca", "plm_rsh_args", "-p 2222 -o 'ProxyJump bastion'", "a"});
  EXPECT_EQ(args.remote.rsh_args,
            (std::vector<std::string>{"-p", "2222", "-o", "ProxyJump bastion"}));
  EXPECT_EQ(parse({"-mca", "plm_rsh_args", "", "a"}).remote.rsh_args, std::vector<std::string>{});
  EXPECT_EQ(args.exports.mca, (std::vector<std::pair<std::string, std::string>>{
                                  {"plm_rsh_args", "-p 2222 -o 'ProxyJump bastion'"}}));
}

// docs/multihost.md's example: -mca plm_rsh_agent "ssh -F ~/cluster.cfg" means the file in the
// home directory, as the same words typed in a shell would (ssh does not expand -F's path).
TEST(CommandLine, TheRshAgentsLeadingTildeIsTheHomeDirectory) {
  const char* saved = std::getenv("HOME");
  const std::string before = saved != nullptr ? saved : "";
  ::setenv("HOME", "/home/me", 1);
  using words = std::vector<std::string>;
  EXPECT_EQ(parse({"-mca", "plm_rsh_agent", "ssh -F ~/cluster.cfg", "a"}).remote.rsh_agent,
            (words{"ssh", "-F", "/home/me/cluster.cfg"}));
  EXPECT_EQ(parse({"-mca", "plm_rsh_agent", "ssh -F '~/cluster.cfg'", "a"}).remote.rsh_agent,
            (words{"ssh", "-F", "~/cluster.cfg"}));  // quoted: as written, as in a shell
  EXPECT_EQ(parse({"-mca", "plm_rsh_args", "-i ~/.ssh/cluster_key", "a"}).remote.rsh_args,
            (words{"-i", "/home/me/.ssh/cluster_key"}));
  const pm::env_map env{{"PM_RSH_AGENT", "~/bin/ssh-wrapper -F ~/c"},
                        {"OMPI_MCA_plm_rsh_args", "-F ~/c2"}};
  const auto r = pm::resolve_remote_options(parse({"a"}).remote, env);
  EXPECT_EQ(r.rsh_agent, (words{"/home/me/bin/ssh-wrapper", "-F", "/home/me/c"}));
  EXPECT_EQ(r.rsh_args, (words{"-F", "/home/me/c2"}));
  // What reaches the ranks (OMPI_MCA_plm_rsh_agent) stays as the user wrote it.
  EXPECT_EQ(parse({"-mca", "plm_rsh_agent", "ssh -F ~/cluster.cfg", "a"}).exports.mca,
            (std::vector<std::pair<std::string, std::string>>{
                {"plm_rsh_agent", "ssh -F ~/cluster.cfg"}}));
  if (saved != nullptr) {
    ::setenv("HOME", before.c_str(), 1);
  } else {
    ::unsetenv("HOME");
  }
}

TEST(CommandLine, RemoteAgentAndNetworkOptions) {
  const auto o = parse({"--launch-agent", "/opt/pm 1/bin/pmd", "--prefix", "/opt/pm", "--iface",
                        "eth0,10.0.0.0/24", "-mca", "oob_tcp_if_include", "ib0,fd00::/64", "-iface",
                        "192.168.1.0/24", "a"});
  EXPECT_EQ(o.remote.launch_agent, "/opt/pm 1/bin/pmd");
  EXPECT_EQ(o.remote.prefix, "/opt/pm");
  EXPECT_EQ(o.remote.interfaces, (std::vector<std::string>{"eth0", "10.0.0.0/24", "ib0",
                                                           "fd00::/64", "192.168.1.0/24"}));
  EXPECT_EQ(
      o.exports.mca,
      (std::vector<std::pair<std::string, std::string>>{{"oob_tcp_if_include", "ib0,fd00::/64"}}));
  EXPECT_EQ(parse({"--prefix=/usr/local", "a"}).remote.prefix, "/usr/local");
}

TEST(CommandLine, LaunchShapeAndHeartbeats) {
  EXPECT_EQ(parse({"--launch", "tree", "a"}).remote.launch, pm::launch_shape::tree);
  EXPECT_EQ(parse({"--launch", "flat", "a"}).remote.launch, pm::launch_shape::flat);
  EXPECT_EQ(parse({"--launch=auto", "a"}).remote.launch, pm::launch_shape::automatic);
  EXPECT_EQ(parse({"-mca", "plm_rsh_no_tree_spawn", "1", "a"}).remote.launch,
            pm::launch_shape::flat);
  EXPECT_EQ(parse({"-mca", "plm_rsh_no_tree_spawn", "0", "a"}).remote.launch,
            pm::launch_shape::automatic);
  EXPECT_EQ(parse({"--tree-fanout", "8", "a"}).remote.tree_fanout, 8u);
  EXPECT_EQ(parse({"--max-ssh", "4", "a"}).remote.max_ssh, 4u);
  EXPECT_EQ(parse({"-mca", "plm_rsh_num_concurrent", "16", "a"}).remote.max_ssh, 16u);
  EXPECT_EQ(parse({"--mca", "plm_ssh_num_concurrent", "7", "a"}).remote.max_ssh, 7u);
  const auto hb = parse({"--heartbeat-interval", "0.25", "--heartbeat-misses", "10", "a"});
  EXPECT_EQ(hb.remote.heartbeat_interval, std::chrono::milliseconds(250));
  EXPECT_EQ(hb.remote.heartbeat_misses, 10u);
}

TEST(CommandLine, ChooseLaunchShape) {
  pm::remote_options o;
  EXPECT_EQ(pm::choose_launch_shape(o, 1), pm::launch_shape::flat);
  EXPECT_EQ(pm::choose_launch_shape(o, 32), pm::launch_shape::flat);
  EXPECT_EQ(pm::choose_launch_shape(o, 33), pm::launch_shape::tree);
  o.tree_fanout = 4;
  EXPECT_EQ(pm::choose_launch_shape(o, 5), pm::launch_shape::tree);
  o.launch = pm::launch_shape::flat;
  EXPECT_EQ(pm::choose_launch_shape(o, 1000), pm::launch_shape::flat);
  o.launch = pm::launch_shape::tree;
  EXPECT_EQ(pm::choose_launch_shape(o, 2), pm::launch_shape::tree);
}

TEST(CommandLine, RshAgentPrecedence) {
  const pm::env_map env{{"PM_RSH_AGENT", "ssh -F pm.cfg"},
                        {"OMPI_MCA_plm_rsh_agent", "ssh -F ompi.cfg"},
                        {"PRTE_MCA_plm_ssh_agent", "ssh -F prte.cfg"},
                        {"OMPI_MCA_plm_rsh_args", "-q"},
                        {"PRTE_MCA_plm_ssh_args", "-v"}};
  auto agent = [](const pm::run_options& o, const pm::env_map& e) {
    return pm::resolve_remote_options(o.remote, e).rsh_agent;
  };
  using words = std::vector<std::string>;
  // The command line wins over the environment ...
  EXPECT_EQ(agent(parse({"-mca", "plm_rsh_agent", "rsh", "a"}), env), words{"rsh"});
  // ... then PM_RSH_AGENT, Open MPI 4's variable, PRRTE's, and ssh.
  EXPECT_EQ(agent(parse({"a"}), env), (words{"ssh", "-F", "pm.cfg"}));
  auto less = env;
  less.erase("PM_RSH_AGENT");
  EXPECT_EQ(agent(parse({"a"}), less), (words{"ssh", "-F", "ompi.cfg"}));
  less.erase("OMPI_MCA_plm_rsh_agent");
  EXPECT_EQ(agent(parse({"a"}), less), (words{"ssh", "-F", "prte.cfg"}));
  less.erase("PRTE_MCA_plm_ssh_agent");
  EXPECT_EQ(agent(parse({"a"}), less), words{"ssh"});
  // plm_rsh_args the same way.
  EXPECT_EQ(pm::resolve_remote_options(parse({"a"}).remote, env).rsh_args, words{"-q"});
  EXPECT_EQ(
      pm::resolve_remote_options(parse({"-mca", "plm_rsh_args", "", "a"}).remote, env).rsh_args,
      words{});
  less.erase("OMPI_MCA_plm_rsh_args");
  EXPECT_EQ(pm::resolve_remote_options(parse({"a"}).remote, less).rsh_args, words{"-v"});
  EXPECT_EQ(pm::resolve_remote_options(parse({"a"}).remote, {}).rsh_args, words{});
  // A malformed variable is one usage line naming it.
  try {
    pm::resolve_remote_options(parse({"a"}).remote, {{"PM_RSH_AGENT", "ssh -F 'x"}});
    ADD_FAILURE() << "no error";
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::usage);
    EXPECT_STREQ(e.what(), "PM_RSH_AGENT 'ssh -F 'x': unterminated single quote");
  }
}

TEST(CommandLine, ResolveJobCarriesTheRemoteOptions) {
  pm::local_host me;
  me.hostname = "here";
  me.cores = 2;
  const auto no_files = [](const std::string& path) -> std::string {
    throw pm::error(pm::errc::parse, "unexpected read of " + path);
  };
  const auto r = pm::resolve_job(parse({"-H", "bob@n1:2,n2", "--max-ssh", "3", "a"}),
                                 {{"PM_RSH_AGENT", "ssh -F '/a b'"}}, me, no_files);
  EXPECT_EQ(r.remote.rsh_agent, (std::vector<std::string>{"ssh", "-F", "/a b"}));
  EXPECT_EQ(r.remote.rsh_args, std::vector<std::string>{});
  EXPECT_EQ(r.remote.max_ssh, 3u);
  ASSERT_EQ(r.alloc.hosts.size(), 2u);
  EXPECT_EQ(r.alloc.hosts[0].user, "bob");
  // Two MPMD segments naming one host with different users is one parse error.
  try {
    pm::resolve_job(parse({"-H", "bob@n1", "a", ":", "-H", "al@n1", "b"}), {}, me, no_files);
    ADD_FAILURE() << "no error";
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::parse);
    EXPECT_STREQ(e.what(),
                 "-H 'al@n1': host 'n1' is listed again with user 'al', before with "
                 "user 'bob'");
  }
}

TEST(CommandLine, BadRemoteInputGetsOneClearLine) {
  EXPECT_EQ(usage_error({"-mca", "plm_rsh_agent", "ssh -F 'cfg", "a"}),
            "-mca plm_rsh_agent 'ssh -F 'cfg': unterminated single quote");
  EXPECT_EQ(usage_error({"--mca", "plm_ssh_agent", "ssh \"x", "a"}),
            "--mca plm_ssh_agent 'ssh \"x': unterminated double quote");
  EXPECT_EQ(usage_error({"-mca", "plm_rsh_agent", "ssh x\\", "a"}),
            "-mca plm_rsh_agent 'ssh x\\': ends with a backslash");
  EXPECT_EQ(usage_error({"-mca", "plm_rsh_agent", "  ", "a"}),
            "-mca plm_rsh_agent '  ': no agent command");
  EXPECT_EQ(usage_error({"-mca", "plm_rsh_agent", "ssh : rsh", "a"}),
            "-mca plm_rsh_agent 'ssh : rsh': alternatives ('ssh : rsh') are not supported; name "
            "one agent");
  EXPECT_EQ(usage_error({"-mca", "plm_rsh_args", "-o 'x", "a"}),
            "-mca plm_rsh_args '-o 'x': unterminated single quote");
  EXPECT_EQ(usage_error({"-mca", "plm_rsh_agent", "ssh\n'", "a"}),
            "-mca plm_rsh_agent 'ssh\\n'': unterminated single quote");
  EXPECT_EQ(usage_error({"--launch-agent", "", "a"}), "--launch-agent: empty value");
  EXPECT_EQ(usage_error({"--prefix", "opt/pm", "a"}),
            "--prefix 'opt/pm': expected an absolute path");
  EXPECT_EQ(usage_error({"--prefix", "", "a"}), "--prefix: empty value");
  EXPECT_EQ(usage_error({"--iface", "eth0,10.0.0.0/33", "a"}),
            "--iface 'eth0,10.0.0.0/33': invalid interface or network '10.0.0.0/33' (expected "
            "names such as eth0 or networks such as 10.0.0.0/24)");
  EXPECT_EQ(usage_error({"--iface", "eth0,,eth1", "a"}),
            "--iface 'eth0,,eth1': empty item (expected names such as eth0 or networks such as "
            "10.0.0.0/24)");
  EXPECT_EQ(usage_error({"--iface", "", "a"}), "--iface: empty value");
  EXPECT_EQ(usage_error({"-mca", "oob_tcp_if_include", "a-very-long-interface", "a"}),
            "-mca oob_tcp_if_include 'a-very-long-interface': invalid interface or network "
            "'a-very-long-interface' (expected names such as eth0 or networks such as "
            "10.0.0.0/24)");
  EXPECT_EQ(usage_error({"--iface", "10.0.0.1/x", "a"}),
            "--iface '10.0.0.1/x': invalid interface or network '10.0.0.1/x' (expected names "
            "such as eth0 or networks such as 10.0.0.0/24)");
  EXPECT_EQ(usage_error({"--iface", "host.example/8", "a"}),
            "--iface 'host.example/8': invalid interface or network 'host.example/8' (expected "
            "names such as eth0 or networks such as 10.0.0.0/24)");
  EXPECT_EQ(usage_error({"--launch", "star", "a"}), "--launch 'star': expected auto, flat or tree");
  EXPECT_EQ(usage_error({"--tree-fanout", "1", "a"}), "--tree-fanout '1': out of range (2..4096)");
  EXPECT_EQ(usage_error({"--tree-fanout", "x", "a"}), "--tree-fanout 'x': not a number");
  EXPECT_EQ(usage_error({"--max-ssh", "0", "a"}), "--max-ssh '0': out of range (1..4096)");
  EXPECT_EQ(usage_error({"-mca", "plm_rsh_num_concurrent", "-1", "a"}),
            "-mca plm_rsh_num_concurrent '-1': not a number");
  EXPECT_EQ(usage_error({"-mca", "plm_rsh_no_tree_spawn", "maybe", "a"}),
            "-mca plm_rsh_no_tree_spawn 'maybe': expected a boolean (1, 0, true, false, yes or "
            "no)");
  // The key is what is empty, not the value.
  EXPECT_EQ(usage_error({"-mca", "", "x", "a"}),
            "-mca '' 'x': empty parameter name (expected -mca KEY VALUE)");
  EXPECT_EQ(usage_error({"--heartbeat-interval", "0", "a"}),
            "--heartbeat-interval '0': expected a positive number of seconds");
  EXPECT_EQ(usage_error({"--heartbeat-interval", "0.0001", "a"}),
            "--heartbeat-interval '0.0001': expected a positive number of seconds");
  EXPECT_EQ(usage_error({"--heartbeat-interval", "500ms", "a"}),
            "--heartbeat-interval '500ms': expected a positive number of seconds");
  EXPECT_EQ(usage_error({"--heartbeat-interval", "7200", "a"}),
            "--heartbeat-interval '7200': out of range (0.001..3600)");
  EXPECT_EQ(usage_error({"--heartbeat-misses", "0", "a"}),
            "--heartbeat-misses '0': out of range (1..1000)");
}

TEST(CommandLine, OpenMpiBooleans) {
  for (const std::string v : {"1", "true", "yes", "TRUE", "Yes"}) {
    EXPECT_TRUE(parse({"--no-abort-on-failure", "-mca", "orte_abort_on_non_zero_status", v, "a"})
                    .abort_on_failure)
        << v;
  }
  for (const std::string v : {"0", "false", "no", "NO"}) {
    auto o = parse({"-mca", "orte_abort_on_non_zero_status", v, "a"});
    EXPECT_FALSE(o.abort_on_failure) << v;
    EXPECT_TRUE(o.abort_policy_given);
  }
  EXPECT_EQ(usage_error({"-mca", "orte_abort_on_non_zero_status", "off", "a"}),
            "-mca orte_abort_on_non_zero_status 'off': expected a boolean (1, 0, true, false, yes "
            "or no)");  // mpirun 4.1.4 refuses "off" too
}

TEST(CommandLine, EnvironmentFillsWhatTheCommandLineLeftOpen) {
  auto o = parse({"a"});
  pm::apply_environment_options(
      o, {{"OMPI_MCA_orte_abort_on_non_zero_status", "no"}, {"MPIEXEC_TIMEOUT", "2.5"}});
  EXPECT_FALSE(o.abort_on_failure);
  EXPECT_EQ(o.timeout, std::chrono::milliseconds(2500));
  auto given = parse({"-mca", "orte_abort_on_non_zero_status", "1", "--timeout", "7", "a"});
  pm::apply_environment_options(
      given, {{"OMPI_MCA_orte_abort_on_non_zero_status", "0"}, {"MPIEXEC_TIMEOUT", "2"}});
  EXPECT_TRUE(given.abort_on_failure);
  EXPECT_EQ(given.timeout, std::chrono::milliseconds(7000));
  auto none = parse({"a"});
  pm::apply_environment_options(none, {{"MPIEXEC_TIMEOUT", ""}});
  EXPECT_EQ(none.timeout.count(), 0);
  auto bad = parse({"a"});
  EXPECT_THROW(pm::apply_environment_options(bad, {{"MPIEXEC_TIMEOUT", "soon"}}), pm::error);
}

TEST(CommandLine, HostOptionIsNamedAsGiven) {
  auto o = parse({"--host", "a:2", "-H", "b", "x"});
  EXPECT_EQ(o.host_list_options, (std::vector<std::string>{"--host", "-H"}));
  pm::local_host me;
  me.hostname = "pm-test-self";
  try {
    pm::resolve_job(parse({"--host", "a:x", "prog"}), {}, me,
                    [](const std::string&) { return std::string(); });
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--host 'a:x': ", 0), 0u) << e.what();
  }
}

TEST(CommandLine, OutputFilenameModifiers) {
  auto o = parse({"--output-filename", "out:nojobid", "a"});
  EXPECT_EQ(o.output_dir, "out");
  EXPECT_TRUE(o.output_nojobid);
  EXPECT_FALSE(o.output_nocopy);
  auto both = parse({"--output-filename", "out:nojobid,nocopy", "a"});
  EXPECT_EQ(both.output_dir, "out");
  EXPECT_TRUE(both.output_nojobid && both.output_nocopy);
  auto nocopy = parse({"--output-filename", "out:nocopy", "a"});
  EXPECT_TRUE(nocopy.output_nocopy && !nocopy.output_nojobid);
  EXPECT_EQ(parse({"--output-filename", "a:b", "a"}).output_dir, "a:b");  // not a modifier
}

// Within each host (docs/gpus.md): Open MPI's spellings; none of them is needed by a plain job.
TEST(CommandLine, BindingAndGpuOptions) {
  EXPECT_FALSE(pm::needs_topology(parse({"a"}).job.mapping));
  EXPECT_FALSE(
      pm::needs_topology(parse({"--bind-to", "none", "--map-by", "node", "a"}).job.mapping));
  EXPECT_FALSE(pm::needs_topology(parse({"-N", "2", "a"}).job.mapping));
  auto o = parse({"--map-by", "ppr:2:numa:pe=3", "--bind-to", "core:overload-allowed",
                  "--gpus-per-rank", "1:reorder", "--report-bindings", "a"});
  const auto& m = o.job.mapping;
  EXPECT_EQ(m.by, pm::map_by::slot);  // across hosts
  EXPECT_EQ(m.host.map, (pm::topo::map_option{pm::topo::object::numa, 2, 3, {}}));
  EXPECT_EQ(m.host.bind, (pm::topo::bind_option{pm::topo::object::core, true}));
  EXPECT_EQ(m.host.gpus, (pm::topo::gpu_option{1, false, true}));
  EXPECT_TRUE(m.report_bindings);
  EXPECT_TRUE(pm::needs_topology(m));
  EXPECT_EQ(parse({"-gpus-per-proc", "2", "a"}).job.mapping.host.gpus.per_rank, 2u);
  EXPECT_EQ(parse({"--cpus-per-proc", "4", "a"}).job.mapping.host.cpus_per_rank, 4u);
  EXPECT_EQ(parse({"--map-by", "socket:OVERSUBSCRIBE", "a"}).job.mapping.oversubscribe, true);
  EXPECT_TRUE(pm::needs_topology(parse({"--map-by", "core", "a"}).job.mapping));
  EXPECT_TRUE(pm::needs_topology(parse({"--report-bindings", "a"}).job.mapping));
  EXPECT_TRUE(pm::needs_topology(parse({"--bind-to", "numa", "a"}).job.mapping));
  EXPECT_EQ(parse({"--map-by", "ppr:2:node", "a"}).job.mapping.host.map.ppr, 2u);
}

TEST(CommandLine, MpirunEverydayOptions) {
  auto n = parse({"-N", "2", "a"});
  EXPECT_EQ(n.job.mapping.by, pm::map_by::ppr_node);
  EXPECT_EQ(n.job.mapping.ppr, 2u);
  EXPECT_EQ(parse({"-npernode", "3", "a"}).job.mapping.ppr, 3u);
  EXPECT_EQ(parse({"--npernode", "3", "a"}).job.mapping.by, pm::map_by::ppr_node);
  EXPECT_EQ(parse({"--rank-by", "node", "a"}).job.mapping.ranking, pm::rank_by::node);
  EXPECT_EQ(parse({"-rank-by", "SLOT", "a"}).job.mapping.ranking, pm::rank_by::slot);
  EXPECT_FALSE(parse({"a"}).job.mapping.ranking.has_value());
  EXPECT_EQ(parse({"--rank-by", "core", "a"}).job.mapping.host.rank_by, pm::topo::object::core);
  // A later --rank-by replaces an earlier one, across hosts or within them (pm::set_rank_by).
  const auto later = parse({"--rank-by", "numa", "--rank-by", "node", "a"}).job.mapping;
  EXPECT_EQ(later.ranking, pm::rank_by::node);
  EXPECT_FALSE(later.host.rank_by.has_value());
  EXPECT_EQ(usage_error({"--rank-by", "cores", "a"}),
            "--rank-by cores: expected one of slot, node, hwthread, core, l3cache, numa, package");
  EXPECT_TRUE(parse({"--display-allocation", "a"}).display_allocation);
  EXPECT_EQ(parse({"-v", "a"}).job.apps[0].argv, (std::vector<std::string>{"a"}));
  EXPECT_EQ(usage_error({"-np", "1", "a", ":", "--app", "f", "b"}),
            "--app 'f': an app file goes among the options before any program");
}

TEST(CommandLine, DefaultHostfile) {
  EXPECT_EQ(parse({"--default-hostfile", "d", "a"}).hostfile, "d");
  // An explicit hostfile wins, in either order, without the "already given" error.
  EXPECT_EQ(parse({"--default-hostfile", "d", "--hostfile", "h", "a"}).hostfile, "h");
  EXPECT_EQ(parse({"--hostfile", "h", "--default-hostfile", "d", "a"}).hostfile, "h");
}

TEST(CommandLine, AppFileExpands) {
  const auto read = [](const std::string& path) -> std::string {
    if (path != "apps") throw pm::error(pm::errc::parse, "cannot read '" + path + "'");
    return "# comment\n-np 2 ./a 'x y'  # trailing\n\n  -np 1 -wdir /tmp ./b\n";
  };
  const std::vector<std::string> args = {"--tag-output", "--app", "apps"};
  EXPECT_EQ(pm::expand_app_file(args, read),
            (std::vector<std::string>{"--tag-output", "-np", "2", "./a", "x y", ":", "-np", "1",
                                      "-wdir", "/tmp", "./b"}));
  const std::vector<std::string> inline_form = {"--app=apps", "-x", "A=1"};
  EXPECT_EQ(pm::expand_app_file(inline_form, read),
            (std::vector<std::string>{"-x", "A=1", "-np", "2", "./a", "x y", ":", "-np", "1",
                                      "-wdir", "/tmp", "./b"}));
  const std::vector<std::string> plain = {"-np", "2", "prog", "--app", "x"};
  EXPECT_EQ(pm::expand_app_file(plain, read), plain);  // after the program: its argument
  const auto empty = [](const std::string&) { return std::string("# nothing\n\n"); };
  const std::vector<std::string> just_app = {"--app", "e"};
  try {
    pm::expand_app_file(just_app, empty);
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_EQ(std::string(e.what()), "--app 'e': no app context in the file");
  }
  // A second file would have replaced the first without a word.
  const std::vector<std::string> twice = {"--app", "apps", "--app=other"};
  try {
    pm::expand_app_file(twice, read);
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::usage);
    EXPECT_EQ(std::string(e.what()),
              "--app given twice (the first: 'apps'): one app file names the whole job");
  }
}

// Spellings that were accepted but not documented (issue 20, item 8): --help lists them now,
// docs/cli.md says what they mean.
TEST(CommandLine, EverySpellingAcceptedIsListed) {
  const auto help = pm::help_text();
  EXPECT_NE(help.find("-np, -n, -c, --np, --n N"), std::string::npos) << help;
  EXPECT_NE(help.find("--mca, -mca, --gmca KEY VALUE"), std::string::npos) << help;
  EXPECT_NE(help.find("(--timeout=3, --np=4, --map-by=node)"), std::string::npos) << help;
  const auto o =
      parse({"--timeout=3", "--n", "2", "--gmca", "btl", "self", "--report=r.json", "a"});
  EXPECT_EQ(o.timeout, std::chrono::seconds(3));
  EXPECT_EQ(o.job.apps[0].np, 2u);
  EXPECT_EQ(o.exports.mca, (std::vector<std::pair<std::string, std::string>>{{"btl", "self"}}));
  EXPECT_EQ(o.report_file, "r.json");
  EXPECT_EQ(usage_error({"--mca=btl", "self", "a"}).find("--mca"), 0u);
}

TEST(CommandLine, DocsCliReferenceIsTheHelpText) {
  std::ifstream in(std::string(PM_SOURCE_DIR) + "/docs/cli.md");
  ASSERT_TRUE(in) << "docs/cli.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find(pm::help_text()), std::string::npos)
      << "docs/cli.md must contain the exact text of `pmrun --help`; regenerate it with\n"
         "  build/bin/pmrun --help";
}

}  // namespace

namespace {

// --enable-recovery (docs/resilience.md, "Recovering single ranks").
TEST(CommandLine, EnableRecovery) {
  const auto o = parse({"--enable-recovery", "--max-restarts", "10", "a"});
  EXPECT_TRUE(o.enable_recovery);
  EXPECT_EQ(o.max_restarts, 10u);
  EXPECT_TRUE(o.abort_on_failure);  // a spent budget leaves the failure to the policy
  EXPECT_FALSE(parse({"a"}).enable_recovery);
  EXPECT_FALSE(parse({"--disable-recovery", "a"}).enable_recovery);
  // Alone (PRRTE's default): no restart, and the others run on past a failed rank.
  const auto alone = parse({"--enable-recovery", "a"});
  EXPECT_TRUE(alone.enable_recovery);
  EXPECT_EQ(alone.max_restarts, 0u);
  EXPECT_FALSE(alone.abort_on_failure);
  EXPECT_TRUE(parse({"--enable-recovery", "-mca", "orte_abort_on_non_zero_status", "1", "a"})
                  .abort_on_failure);
  EXPECT_EQ(usage_error({"--enable-recovery", "--disable-recovery", "a"}),
            "--enable-recovery and --disable-recovery contradict each other: give one");
  EXPECT_EQ(usage_error({"--disable-recovery", "--enable-recovery", "a"}),
            "--enable-recovery and --disable-recovery contradict each other: give one");
}

}  // namespace
