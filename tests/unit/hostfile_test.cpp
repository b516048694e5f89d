// Open MPI 4.1 hostfiles. The expectations marked "mpirun" were checked with
// mpirun.openmpi --display-map --do-not-launch --hostfile F.
#include <gtest/gtest.h>

#include "pm/allocation.hpp"
#include "pm/error.hpp"

namespace {

template <class F>
std::string parse_error(F&& f) {
  try {
    f();
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::parse) << e.what();
    return e.what();
  }
  return "no error";
}

std::string names(const pm::allocation& a) {
  std::string s;
  for (const auto& h : a.hosts) {
    s += (s.empty() ? "" : ",") + h.name + ":" + std::to_string(h.slots);
    if (h.max_slots) s += "/" + std::to_string(h.max_slots);
  }
  return s;
}

pm::allocation parse(std::string_view text) {
  return pm::parse_hostfile(text, "hf");
}

TEST(Hostfile, SlotsMaxSlotsCommentsAndBlankLines) {
  const auto a = parse(
      "# cluster\n"
      "\n"
      "n1 slots=2\n"
      "   n2\tslots=4 max_slots=6   # trailing comment\n"
      "n3#no space before the comment\n");
  EXPECT_EQ(names(a), "n1:2,n2:4/6,n3:1");
  EXPECT_EQ(a.source, pm::allocation_source::hostfile);
  EXPECT_TRUE(a.hosts[0].slots_given);
  EXPECT_TRUE(a.hosts[1].slots_given);
}

TEST(Hostfile, ASingleBareLineLeavesTheCountToTheHost) {
  const auto a = parse("n1\n");
  ASSERT_EQ(a.hosts.size(), 1u);
  EXPECT_FALSE(a.hosts[0].slots_given);
  EXPECT_EQ(a.hosts[0].slots, 1u);  // placeholder until its cores are known
}

TEST(Hostfile, SlotsAddingUpPastTheLimitAreRefusedNotWrapped) {
  EXPECT_EQ(names(parse("n1 slots=4294967294\nn1\n")), "n1:4294967295");
  EXPECT_EQ(parse_error([] { parse("n1 slots=4294967295\nn1\n"); }),
            "hostfile hf:2: host 'n1' adds up to more than 4294967295 slots (overflow)");
}

TEST(Hostfile, RepeatedBareLinesAddASlotEach) {
  const auto a = parse("n1\nn2\nn1\nn1\n");
  EXPECT_EQ(names(a), "n1:3,n2:1");
  EXPECT_TRUE(a.hosts[0].slots_given);
  EXPECT_FALSE(a.hosts[1].slots_given);
}

TEST(Hostfile, OpenMpiCornerCases) {
  EXPECT_EQ(names(parse("a slots=2\na\n")), "a:3");     // mpirun: 3 slots
  EXPECT_EQ(names(parse("a max_slots=4\n")), "a:4/4");  // mpirun: slots 4, max 4
  EXPECT_TRUE(parse("a max_slots=4\n").hosts[0].slots_given);
  EXPECT_EQ(names(parse("a\na max_slots=3\n")), "a:2/3");          // mpirun: slots 2, max 3
  EXPECT_EQ(names(parse("a slots=2 max_slots=3\na\n")), "a:3/3");  // mpirun: slots 3, max 3
  EXPECT_EQ(names(parse("a slots = 2\nb slots= 3\nc slots =4\n")), "a:2,b:3,c:4");  // mpirun
  EXPECT_EQ(names(parse("x count=3\ny cpu=2\nz max-slots=5 slots=1\n")), "x:3,y:2,z:1/5");
}

TEST(Hostfile, WindowsLineEndsAndNoFinalNewline) {
  EXPECT_EQ(names(parse("a slots=2\r\nb\r\n\r\n")), "a:2,b:1");
  EXPECT_EQ(names(parse("a slots=2\nb slots=3")), "a:2,b:3");
}

TEST(Hostfile, BadValuesNameFileLineAndToken) {
  EXPECT_EQ(parse_error([] { pm::parse_hostfile("a\n\nb slots=two\n", "hosts.txt"); }),
            "hostfile hosts.txt:3: invalid slots value 'two' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { parse("a slots=0"); }),
            "hostfile hf:1: invalid slots value '0' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { parse("a slots="); }),
            "hostfile hf:1: invalid slots value '' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { parse("a slots=-2"); }),
            "hostfile hf:1: invalid slots value '-2' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { parse("a slots=4294967296"); }),
            "hostfile hf:1: invalid slots value '4294967296' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { parse("a max_slots=x"); }),
            "hostfile hf:1: invalid max_slots value 'x' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { parse("a cpu=0"); }),
            "hostfile hf:1: invalid cpu value '0' (expected a positive integer)");
}

TEST(Hostfile, UnknownKeysAndStrayTokens) {
  EXPECT_EQ(parse_error([] { parse("# x\na slotz=2"); }),
            "hostfile hf:2: unknown key 'slotz' (expected slots=N, max_slots=N, username=NAME or "
            "port=N)");
  EXPECT_EQ(
      parse_error([] { parse("a slot=2"); }),  // mpirun: a parse error too
      "hostfile hf:1: unknown key 'slot' (expected slots=N, max_slots=N, username=NAME or port=N)");
  EXPECT_EQ(
      parse_error([] { parse("a 4"); }),
      "hostfile hf:1: unexpected '4' (expected slots=N, max_slots=N, username=NAME or port=N)");
  EXPECT_EQ(parse_error([] { parse("a slots=2 slots=3"); }),
            "hostfile hf:1: 'slots' given twice for 'a'");
  EXPECT_EQ(parse_error([] { parse("slots=2"); }),
            "hostfile hf:1: expected a host name before 'slots=2'");
  EXPECT_EQ(parse_error([] { parse("a$b\n"); }), "hostfile hf:1: invalid host name 'a$b'");
}

TEST(Hostfile, UserAndPortAsOpenMpiReadsThem) {
  // mpirun 4.1.4 (a plm_rsh_agent that prints its argv): "bob@n1", and "-p 2222 bob@n2".
  const auto a = parse(
      "bob@n1 slots=2\n"
      "n2 slots=2 port=2222 username=bob\n"
      "n3 user_name=al port = 22\n"
      "n4 user-name=x.y_z-1\n"
      "n5\n"
      "bob@n1\n"  // the same user: one more slot
      "n6 username=bob\n"
      "bob@n6\n");  // the same user spelled the other way
  EXPECT_EQ(names(a), "n1:3,n2:2,n3:1,n4:1,n5:1,n6:2");
  EXPECT_EQ(a.hosts[0].user, "bob");
  EXPECT_EQ(a.hosts[0].port, 0);
  EXPECT_EQ(a.hosts[1].user, "bob");
  EXPECT_EQ(a.hosts[1].port, 2222);
  EXPECT_EQ(a.hosts[2].user, "al");
  EXPECT_EQ(a.hosts[2].port, 22);
  EXPECT_EQ(a.hosts[3].user, "x.y_z-1");
  EXPECT_EQ(a.hosts[4].user, "");
  EXPECT_EQ(a.hosts[4].port, 0);
  EXPECT_EQ(a.hosts[5].user, "bob");
  EXPECT_EQ(parse("bob@n1 username=bob\n").hosts[0].user, "bob");
}

TEST(Hostfile, BadUsersAndPorts) {
  EXPECT_EQ(parse_error([] { parse("a port=0"); }),
            "hostfile hf:1: invalid port value '0' (expected a port number 1..65535)");
  EXPECT_EQ(parse_error([] { parse("# c\na port=abc"); }),
            "hostfile hf:2: invalid port value 'abc' (expected a port number 1..65535)");
  EXPECT_EQ(parse_error([] { parse("a port=65536"); }),
            "hostfile hf:1: invalid port value '65536' (expected a port number 1..65535)");
  EXPECT_EQ(parse_error([] { parse("a port="); }),
            "hostfile hf:1: invalid port value '' (expected a port number 1..65535)");
  EXPECT_EQ(parse_error([] { parse("a port=-22"); }),
            "hostfile hf:1: invalid port value '-22' (expected a port number 1..65535)");
  EXPECT_EQ(parse_error([] { parse("a port=22 port=23"); }),
            "hostfile hf:1: 'port' given twice for 'a'");
  EXPECT_EQ(parse_error([] { parse("@a slots=2"); }), "hostfile hf:1: empty user name in '@a'");
  EXPECT_EQ(parse_error([] { parse("bob@ slots=2"); }), "hostfile hf:1: empty host name in 'bob@'");
  EXPECT_EQ(parse_error([] { parse("b$b@a"); }), "hostfile hf:1: invalid user name 'b$b'");
  EXPECT_EQ(parse_error([] { parse("a username="); }),
            "hostfile hf:1: invalid username value '' (expected a user name: letters, digits, "
            "'.', '_', '-')");
  EXPECT_EQ(parse_error([] { parse("a username=-l"); }),
            "hostfile hf:1: invalid username value '-l' (expected a user name: letters, digits, "
            "'.', '_', '-')");
  EXPECT_EQ(parse_error([] { parse("a user_name=b\"b"); }),
            "hostfile hf:1: invalid user_name value 'b\"b' (expected a user name: letters, "
            "digits, '.', '_', '-')");
  EXPECT_EQ(parse_error([] { parse("a username=bob user-name=al"); }),
            "hostfile hf:1: 'user-name' given twice for 'a'");
  // A user name with a space is two fields: the second is not a key.
  EXPECT_EQ(parse_error([] { parse("a username=b b"); }),
            "hostfile hf:1: unexpected 'b' (expected slots=N, max_slots=N, username=NAME or "
            "port=N)");
  // mpirun 4.1: "user=" is a parse error there too.
  EXPECT_EQ(parse_error([] { parse("a user=bob"); }),
            "hostfile hf:1: unknown key 'user' (expected slots=N, max_slots=N, username=NAME or "
            "port=N)");
  // mpirun lets username= win over alice@; a contradiction is refused here.
  EXPECT_EQ(parse_error([] { parse("alice@a username=bob"); }),
            "hostfile hf:1: user 'alice' and username=bob disagree for 'a'");
}

TEST(Hostfile, RepeatedHostReachedAnotherWayIsAnError) {
  EXPECT_EQ(parse_error([] { parse("a slots=2\nbob@a\n"); }),
            "hostfile hf:2: host 'a' is listed again with user 'bob', before with no user");
  EXPECT_EQ(parse_error([] { parse("bob@a\nal@a\n"); }),
            "hostfile hf:2: host 'a' is listed again with user 'al', before with user 'bob'");
  EXPECT_EQ(parse_error([] { parse("a port=2222\nb\na\n"); }),
            "hostfile hf:3: host 'a' is listed again with no port, before with port 2222");
  EXPECT_EQ(parse_error([] { parse("a port=2222\na port=2200\n"); }),
            "hostfile hf:2: host 'a' is listed again with port 2200, before with port 2222");
}

TEST(Hostfile, RepeatedNameWithSlotsIsAnError) {
  // mpirun: "contains multiple definitions of the slot count".
  EXPECT_EQ(parse_error([] { parse("a slots=2\na slots=2\n"); }),
            "hostfile hf:2: host 'a' is listed again; give its slots on one line only");
  EXPECT_EQ(parse_error([] { parse("a\nb\na slots=2\n"); }),
            "hostfile hf:3: host 'a' is listed again; give its slots on one line only");
}

TEST(Hostfile, MaxSlotsBelowSlots) {
  EXPECT_EQ(parse_error([] { parse("a slots=4 max_slots=2"); }),
            "hostfile hf:1: max_slots=2 is below slots=4 for 'a'");
  EXPECT_EQ(parse_error([] { parse("a slots=2 max_slots=2\na\n"); }),
            "hostfile hf:2: max_slots=2 is below slots=3 for 'a'");
}

TEST(Hostfile, NoHosts) {
  EXPECT_EQ(parse_error([] { parse("# nothing\n\n   \n"); }), "hostfile hf: no hosts in it");
  EXPECT_EQ(parse_error([] { parse(""); }), "hostfile hf: no hosts in it");
}

}  // namespace
