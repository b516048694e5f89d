// pmrun's stdin from what is neither a pipe, a regular file nor a terminal (issue 20, item 7):
// a character device such as /dev/zero, which epoll refuses, so the forwarder read it as empty.
// Ranks that stop reading their stdin, and a pmrun started without its standard descriptors.
#include <gtest/gtest.h>

#include <string>

#include "support/command.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::run_command;

// `pmrun ARGS < INPUT` through a shell (the redirection is the point).
pm::test::command_result pmrun_from(const std::string& input, const std::string& args) {
  return run_command(
      {"/bin/sh", "-c",
       "exec '" + pm::test::pmrun_path() + "' --allow-run-as-root " + args + " < " + input},
      60s);
}

// `SHELL_WORDS pmrun ARGS REDIRECTIONS` through a shell, bounded: a hang fails the test.
pm::test::command_result pmrun_shell(const std::string& before, const std::string& args,
                                     const std::string& redirections) {
  return run_command({"/bin/sh", "-c",
                      before + " '" + pm::test::pmrun_path() + "' --allow-run-as-root " + args +
                          " " + redirections},
                     30s);
}

TEST(PmrunStdin, ACharacterDeviceReachesEveryRankWithStdinAll) {
  // Each rank reads 100000 bytes and ends; the endless input is then no longer read, and the job
  // ends as its ranks did.
  auto r = pmrun_from("/dev/zero", "-np 3 --stdin all /bin/sh -c 'head -c 100000 | wc -c'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "100000\n100000\n100000\n");
  r = pmrun_from("/dev/urandom", "-np 2 --stdin all /bin/sh -c 'head -c 70000 | wc -c'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "70000\n70000\n");
  // /dev/null: end of input at once, as before.
  r = pmrun_from("/dev/null", "-np 2 --stdin all /bin/sh -c 'wc -c'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "0\n0\n");
}

TEST(PmrunStdin, ACharacterDeviceReachesTheReadingRank) {
  // Handed over directly (not a terminal): the rank reads the device itself.
  auto r = pmrun_from("/dev/zero", "-np 2 --stdin 1 /bin/sh -c 'head -c 4096 | wc -c'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out == "0\n4096\n" || r.out == "4096\n0\n") << r.out;
}

TEST(PmrunStdin, ARankThatNeverReadsDoesNotStopTheOthersInput) {
  // More than the pipes and the forwarder's bounded buffer hold: with pmrun keeping the pipe of
  // the rank that left open, its input filled up and rank 0 waited for the rest forever.
  auto r = pmrun_shell("head -c 3000000 /dev/zero |",
                       "--stdin all -np 2 /bin/sh -c "
                       "'if [ $OMPI_COMM_WORLD_RANK = 0 ]; then wc -c; else echo left; fi'",
                       "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("3000000\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("left\n"), std::string::npos) << r.out;
  // Ranks that close their stdin and go on running: the others still get every byte.
  r = pmrun_shell("head -c 5000000 /dev/zero |",
                  "--stdin all -np 3 /bin/sh -c "
                  "'if [ $OMPI_COMM_WORLD_RANK = 0 ]; then wc -c; "
                  "else exec 0<&-; sleep 2; echo closed; fi'",
                  "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("5000000\n"), std::string::npos) << r.out;
}

TEST(PmrunStandardDescriptors, AClosedOneIsNotTakenByTheAgentsLink) {
  // Without stdout: the ranks' output goes nowhere, and the job is not lost for writing it.
  auto r = pmrun_shell("exec", "-np 2 /bin/sh -c 'echo hi; echo there'", ">&-");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  // Without stderr: the ranks' exit code, not a lost host.
  for (int i = 0; i < 4; ++i) {
    r = pmrun_shell("exec", "-np 2 /bin/sh -c 'echo x >&2; exit 3'", "2>&-");
    EXPECT_EQ(r.exit_code, 3) << r.out;
  }
  // Without stdin: rank 0 reads end of input (not the link), and writing to it fails.
  r = pmrun_shell("exec", "-np 1 /bin/sh -c 'wc -c; echo junk >&0; echo $?'", "<&-");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "0\n1\n") << r.out;
}

}  // namespace
