// pmrun's command line: mpirun spellings (Open MPI 4 and 5), MPMD, and every bad input's message.
#include <gtest/gtest.h>

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
  EXPECT_TRUE(o.exports.mca.empty());
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
}

TEST(CommandLine, McaKeys) {
  auto o = parse({"-mca", "btl", "self,tcp", "--mca", "orte_abort_on_non_zero_status", "0", "-gmca",
                  "pml", "ob1", "a"});
  EXPECT_FALSE(o.abort_on_failure);
  EXPECT_EQ(o.exports.mca, (std::vector<std::pair<std::string, std::string>>{{"btl", "self,tcp"},
                                                                             {"pml", "ob1"}}));
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
  EXPECT_EQ(usage_error({"--bind-to", "core", "a"}),
            "--bind-to 'core': not supported (pmrun does not bind ranks; use --bind-to none)");
  EXPECT_EQ(usage_error({"--map-by", "socket", "a"}),
            "--map-by 'socket': not supported (use slot, node or ppr:N:node; pmrun does not bind "
            "to cores)");
  EXPECT_EQ(usage_error({"--map-by", "ppr:x:node", "a"}), "--map-by 'x': not a number");
  EXPECT_EQ(usage_error({"--map-by", "ppr:2:socket", "a"}),
            "--map-by 'ppr:2:socket': ppr per 'socket' is not supported (only ppr:N:node)");
  EXPECT_EQ(usage_error({"--map-by", "node:FOO", "a"}),
            "--map-by 'node:FOO': unknown modifier 'FOO' (OVERSUBSCRIBE and NOOVERSUBSCRIBE are "
            "supported)");
  EXPECT_EQ(usage_error({"--timeout", "soon", "a"}),
            "--timeout 'soon': expected a positive number of seconds");
  EXPECT_EQ(usage_error({"--timeout", "0", "a"}),
            "--timeout '0': expected a positive number of seconds");
  EXPECT_EQ(usage_error({"-mca", "orte_abort_on_non_zero_status", "maybe", "a"}),
            "-mca orte_abort_on_non_zero_status 'maybe': expected 0 or 1");
  EXPECT_EQ(usage_error({"-mca", "btl"}), "-mca: missing value (expected KEY VALUE)");
  EXPECT_EQ(usage_error({"--output", "fancy", "a"}),
            "--output: unknown output mode 'fancy' (tag, timestamp, merge-stderr-to-stdout, "
            "json-lines, dir=DIR)");
  EXPECT_EQ(usage_error({"--master-port", "70000", "a"}),
            "--master-port '70000': out of range (1..65535)");
  EXPECT_EQ(usage_error({"--tag-output=yes", "a"}), "--tag-output takes no value with '='");
  EXPECT_EQ(usage_error({"-H", "", "a"}), "-H: empty value");
  EXPECT_EQ(usage_error({"--hostfile", "a", "--hostfile", "b", "x"}),
            "--hostfile 'b': a hostfile was already given ('a')");
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
