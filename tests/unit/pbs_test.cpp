// PBS nodefiles, the managed-allocation probe (Slurm, then PBS) and read_text_file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

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

TEST(Pbs, SlotsAreOccurrencesInOrderOfFirstAppearance) {
  const auto a = pm::parse_pbs_nodefile("n2\nn1\nn2\n\nn2\nn1\n", "nodes");
  EXPECT_EQ(names(a), "n2:3,n1:2");
  EXPECT_EQ(a.source, pm::allocation_source::pbs);
  EXPECT_TRUE(a.hosts[0].slots_given);
}

TEST(Pbs, BlanksAndLineEndsAreIgnored) {
  EXPECT_EQ(names(pm::parse_pbs_nodefile("  n1.cluster \r\nn1.cluster\n\tn2", "nodes")),
            "n1.cluster:2,n2:1");
}

TEST(Pbs, Errors) {
  EXPECT_EQ(parse_error([] { pm::parse_pbs_nodefile("n1\nn 2\n", "/var/spool/aux/1"); }),
            "PBS_NODEFILE /var/spool/aux/1:2: invalid host name 'n 2'");
  EXPECT_EQ(parse_error([] { pm::parse_pbs_nodefile("\n\n", "f"); }),
            "PBS_NODEFILE f: no hosts in it");
}

TEST(ManagedAllocation, PbsThroughTheReader) {
  std::vector<std::string> asked;
  pm::file_reader reader = [&](const std::string& path) {
    asked.push_back(path);
    return std::string("x\ny\nx\n");
  };
  auto a = pm::managed_allocation({{"PBS_NODEFILE", "/var/spool/pbs/aux/1"}}, reader);
  ASSERT_TRUE(a);
  EXPECT_EQ(names(*a), "x:2,y:1");
  EXPECT_EQ(a->source, pm::allocation_source::pbs);
  EXPECT_EQ(asked, std::vector<std::string>{"/var/spool/pbs/aux/1"});
}

TEST(ManagedAllocation, SlurmComesFirstAndNothingMeansNone) {
  int reads = 0;
  pm::file_reader reader = [&](const std::string&) {
    ++reads;
    return std::string("p\n");
  };
  auto a = pm::managed_allocation(
      {{"PBS_NODEFILE", "/x"}, {"SLURM_JOB_ID", "3"}, {"SLURM_JOB_NODELIST", "s[1-2]"}}, reader);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->source, pm::allocation_source::slurm);
  EXPECT_EQ(names(*a), "s1:1,s2:1");
  EXPECT_EQ(reads, 0);
  EXPECT_FALSE(pm::managed_allocation({{"PATH", "/bin"}, {"PBS_NODEFILE", ""}}, reader));
  EXPECT_EQ(reads, 0);
}

TEST(ManagedAllocation, ReaderErrorsPassThrough) {
  EXPECT_EQ(parse_error([] {
              pm::managed_allocation({{"PBS_NODEFILE", "/nonexistent/aux/9"}}, pm::read_text_file);
            }),
            "cannot read '/nonexistent/aux/9': No such file or directory");
}

TEST(ReadTextFile, ReadsWholeFiles) {
  char path[] = "/tmp/pm_read_text_file_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string text(200000, 'a');
  text += "\nlast line without newline";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  std::string got;
  try {
    got = pm::read_text_file(path);
  } catch (...) {
    unlink(path);
    throw;
  }
  unlink(path);
  EXPECT_EQ(got, text);
}

TEST(ReadTextFile, ErrorsNameTheFileAndTheReason) {
  EXPECT_EQ(parse_error([] { pm::read_text_file("/nonexistent/hostfile"); }),
            "cannot read '/nonexistent/hostfile': No such file or directory");
  EXPECT_EQ(parse_error([] { pm::read_text_file("/"); }), "cannot read '/': Is a directory");
}

TEST(ReadTextFile, AnEndlessFileIsRefusedAtTheBound) {
  // `--hostfile /dev/zero` grew pmrun's memory without end (about 600 MB a second).
  EXPECT_EQ(parse_error([] { pm::read_text_file("/dev/zero"); }),
            "'/dev/zero' holds more than 256 MiB (is it the file you meant?)");
}

}  // namespace
