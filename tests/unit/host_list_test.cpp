// -H/--host lists: mpirun's "a,b:4,c" syntax and its one-line errors.
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
  for (const auto& h : a.hosts)
    s += (s.empty() ? "" : ",") + h.name + ":" + std::to_string(h.slots);
  return s;
}

TEST(HostList, HostsWithoutCountHaveOneSlot) {
  const auto a = pm::parse_host_list("a,b:4,c,10.0.0.2:2");
  EXPECT_EQ(names(a), "a:1,b:4,c:1,10.0.0.2:2");
  EXPECT_EQ(a.source, pm::allocation_source::host_list);
  EXPECT_EQ(a.total_slots(), 8u);
  for (const auto& h : a.hosts) {
    EXPECT_TRUE(h.slots_given);  // -H always states the count (1 when omitted)
    EXPECT_EQ(h.max_slots, 0u);
    EXPECT_FALSE(h.local);  // deciding that is resolve_allocation's job
  }
}

TEST(HostList, RepeatedHostsAddUpInFirstOrder) {
  EXPECT_EQ(names(pm::parse_host_list("a,b,a:3,b")), "a:4,b:2");
  EXPECT_EQ(names(pm::parse_host_list("x:4294967294,x")), "x:4294967295");
}

TEST(HostList, SlotsAddingUpPastTheLimitAreRefusedNotWrapped) {
  EXPECT_EQ(parse_error([] { pm::parse_host_list("x:4294967295,x"); }),
            "-H 'x:4294967295,x': host 'x' adds up to more than 4294967295 slots (overflow)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a:2147483648,b,a:2147483648"); }),
            "-H 'a:2147483648,b,a:2147483648': host 'a' adds up to more than 4294967295 slots "
            "(overflow)");
}

TEST(HostList, NamesMayHoldLettersDigitsDashDotUnderscore) {
  EXPECT_EQ(names(pm::parse_host_list("Node_1.example-site.org:2")), "Node_1.example-site.org:2");
  EXPECT_EQ(names(pm::parse_host_list("192.168.1.10")), "192.168.1.10:1");
}

TEST(HostList, BadCountsNameTheListAndTheToken) {
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a:x"); }),
            "-H 'a:x': invalid slot count 'x' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("b,a:0"); }),
            "-H 'b,a:0': invalid slot count '0' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a:-1"); }),
            "-H 'a:-1': invalid slot count '-1' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a:4294967296"); }),
            "-H 'a:4294967296': invalid slot count '4294967296' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a:99999999999"); }),
            "-H 'a:99999999999': invalid slot count '99999999999' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a:"); }),
            "-H 'a:': invalid slot count '' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("::1"); }),
            "-H '::1': invalid host name '::1' (IPv6 addresses are not accepted; use a host "
            "name)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a,2001:db8::1:2"); }),
            "-H 'a,2001:db8::1:2': invalid host name '2001:db8::1:2' (IPv6 addresses are not "
            "accepted; use a host name)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a:2:3"); }),
            "-H 'a:2:3': invalid slot count '2:3' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a: 2"); }),
            "-H 'a: 2': invalid slot count ' 2' (expected a positive integer)");
}

TEST(HostList, EmptyItemsAndNames) {
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a,,b"); }), "-H 'a,,b': empty host name");
  EXPECT_EQ(parse_error([] { pm::parse_host_list(":2"); }), "-H ':2': empty host name");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a,"); }), "-H 'a,': empty host name");
  EXPECT_EQ(parse_error([] { pm::parse_host_list(",a"); }), "-H ',a': empty host name");
  EXPECT_EQ(parse_error([] { pm::parse_host_list(""); }), "-H: empty host list");
}

TEST(HostList, InvalidCharacters) {
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a b"); }), "-H 'a b': invalid host name 'a b'");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("ok,us er@n1:2"); }),
            "-H 'ok,us er@n1:2': invalid user name 'us er'");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("n[1-2]"); }),
            "-H 'n[1-2]': invalid host name 'n[1-2]'");
}

TEST(HostList, UserAtHostAsMpirunTakesIt) {
  // mpirun 4.1: -H bob@node1:2 runs the agent as "ssh bob@node1".
  const auto a = pm::parse_host_list("bob@node1:2,node2,al.x_y-z@10.0.0.2");
  EXPECT_EQ(names(a), "node1:2,node2:1,10.0.0.2:1");
  EXPECT_EQ(a.hosts[0].user, "bob");
  EXPECT_EQ(a.hosts[1].user, "");
  EXPECT_EQ(a.hosts[2].user, "al.x_y-z");
  for (const auto& h : a.hosts) EXPECT_EQ(h.port, 0);  // -H has no port syntax (mpirun neither)
  // A repeated host adds up when it is reached the same way.
  const auto twice = pm::parse_host_list("bob@n1,bob@n1:3");
  EXPECT_EQ(names(twice), "n1:4");
  EXPECT_EQ(twice.hosts[0].user, "bob");
}

TEST(HostList, BadUsers) {
  EXPECT_EQ(parse_error([] { pm::parse_host_list("@n1"); }), "-H '@n1': empty user name in '@n1'");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("bob@"); }), "-H 'bob@': empty host name");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("bob@:2"); }), "-H 'bob@:2': empty host name");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a@b@n1"); }),
            "-H 'a@b@n1': invalid user name 'a@b'");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("-oProxy@n1"); }),
            "-H '-oProxy@n1': invalid user name '-oProxy'");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("b$b@n1"); }),
            "-H 'b$b@n1': invalid user name 'b$b'");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("bob@n1,al@n1"); }),
            "-H 'bob@n1,al@n1': host 'n1' is listed again with user 'al', before with user 'bob'");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("bob@n1,n1:2"); }),
            "-H 'bob@n1,n1:2': host 'n1' is listed again with no user, before with user 'bob'");
}

TEST(HostList, ControlCharactersAreSpelledOutToKeepOneLine) {
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a\nb\x01"); }),
            "-H 'a\\nb\\x01': invalid host name 'a\\nb\\x01'");
}

TEST(HostList, MessagesUseTheOptionAsSpelled) {
  EXPECT_EQ(parse_error([] { pm::parse_host_list("a:x", "--host"); }),
            "--host 'a:x': invalid slot count 'x' (expected a positive integer)");
  EXPECT_EQ(parse_error([] { pm::parse_host_list("", "--host"); }), "--host: empty host list");
}

}  // namespace
