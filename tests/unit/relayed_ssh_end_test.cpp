// How a tree-relayed host's ssh ended (child_closed from its parent's agent), in the flat
// launch's words and naming the parent. The relay itself is the launcher machine's
// (tests/unit/launcher_test.cpp).
#include "launch/relayed_ssh_end.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

namespace ln = pm::link;

pm::host named(std::string name) {
  pm::host h;
  h.name = std::move(name);
  return h;
}

TEST(RelayedSshEnd, ExitZeroSaysNothing) {
  const auto e = pm::launch::relayed_ssh_end(ln::child_closed{3, 0, 0, ""}, named("node4"),
                                             "/x/pmd", "node1", true);
  EXPECT_TRUE(e.how.empty());
  EXPECT_FALSE(e.retryable);
}

TEST(RelayedSshEnd, SshFailureBeforeTheHelloNamesBothHostsAndMayBeRetried) {
  const auto e = pm::launch::relayed_ssh_end(
      ln::child_closed{3, 255, 0, "Connection closed by 10.0.0.4 port 22"}, named("node4"),
      "/x/pmd", "node1", false);
  EXPECT_NE(e.how.find("node4"), std::string::npos) << e.how;
  EXPECT_NE(e.how.find("from node1"), std::string::npos) << e.how;
  EXPECT_NE(e.how.find("Connection closed"), std::string::npos) << e.how;
  EXPECT_TRUE(e.retryable);  // what sshd's MaxStartups does under a burst
  // A refused connection is final: trying again at once would only delay the line.
  const auto refused = pm::launch::relayed_ssh_end(
      ln::child_closed{3, 255, 0, "Connection refused"}, named("node4"), "/x/pmd", "node1", false);
  EXPECT_NE(refused.how.find("Connection refused"), std::string::npos) << refused.how;
  EXPECT_FALSE(refused.retryable);
  const auto later = pm::launch::relayed_ssh_end(ln::child_closed{3, 255, 0, ""}, named("node4"),
                                                 "/x/pmd", "node1", true);
  EXPECT_FALSE(later.retryable);  // after the hello the job may have run: never again
}

TEST(RelayedSshEnd, AMissingAgentAndASignalAndNoSshAreSaid) {
  auto e = pm::launch::relayed_ssh_end(ln::child_closed{3, 127, 0, ""}, named("node4"), "/x/pmd",
                                       "node1", false);
  EXPECT_NE(e.how.find("not found on node4"), std::string::npos) << e.how;
  e = pm::launch::relayed_ssh_end(ln::child_closed{3, 137, 0, "bash: line 1: 7 Killed"},
                                  named("node4"), "/x/pmd", "node1", true);
  EXPECT_EQ(e.how, "the agent pmd on node4 was killed by SIGKILL, from node1") << e.how;
  e = pm::launch::relayed_ssh_end(ln::child_closed{3, -1, 9, ""}, named("node4"), "/x/pmd", "node1",
                                  true);
  EXPECT_NE(e.how.find("SIGKILL"), std::string::npos) << e.how;
  e = pm::launch::relayed_ssh_end(ln::child_closed{3, -1, 0, "no ssh"}, named("node4"), "/x/pmd",
                                  "node1", false);
  EXPECT_NE(e.how.find("could not start ssh to node4: no ssh"), std::string::npos) << e.how;
  EXPECT_FALSE(e.retryable);
}

}  // namespace
