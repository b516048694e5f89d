// pmrun's stdin from what is neither a pipe, a regular file nor a terminal (issue 20, item 7):
// a character device such as /dev/zero, which epoll refuses, so the forwarder read it as empty.
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

}  // namespace
