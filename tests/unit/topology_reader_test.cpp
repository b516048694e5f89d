// The hwloc reader against hwloc's own tools: every real machine in tests/data/topologies is read
// and checked against hwloc-calc and lstopo run on the same XML; the GPUs and NICs of the
// machines that have them against a table written from their lstopo listing (docs/gpus.md).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "pm/error.hpp"
#include "pm/topology.hpp"
#include "support/topologies.hpp"
#include "topology/read_hwloc.hpp"

namespace {

using pm::topo::gpu_vendor;
using pm::topo::nic_kind;
using pm::topo::none;

std::uint32_t count_of(const std::filesystem::path& xml, const std::string& type) {
  // lstopo lists every object of the type, those without cpus too (as the summary counts them).
  const auto out = pm::test::run_command("lstopo-no-graphics -i '" + xml.string() + "' --only " +
                                         type + " | grep -vc assuming");
  return out.empty() ? 0 : static_cast<std::uint32_t>(std::stoul(out));
}

class EveryMachine : public ::testing::Test {
 protected:
  void SetUp() override {
    files_ = pm::test::topology_files();
    ASSERT_FALSE(files_.empty()) << "no topologies in " << pm::test::topologies_dir();
  }
  std::vector<std::filesystem::path> files_;
};

TEST_F(EveryMachine, SummaryRoundTripsThroughText) {
  for (const auto& f : files_) {
    SCOPED_TRACE(f.filename().string());
    const auto t = pm::topo::read_topology_xml(f.string());
    const auto text = pm::topo::to_text(t);
    EXPECT_EQ(pm::topo::topology_from_text(text), t);
    EXPECT_EQ(text.find_first_of(" \n\t"), std::string::npos);
    EXPECT_LT(text.size(), 1200u);  // it travels in the agent's hello
  }
}

TEST_F(EveryMachine, CpusAgreeWithHwlocCalc) {
  ASSERT_TRUE(pm::test::have_hwloc_calc())
      << "hwloc-calc is not installed (apt: hwloc; ./dev.sh test installs it)";
  for (const auto& f : files_) {
    SCOPED_TRACE(f.filename().string());
    const auto t = pm::topo::read_topology_xml(f.string());
    // PUs: the same OS indexes, in the same (logical) order.
    const auto pus = pm::test::numbers(pm::test::hwloc_calc(f, "--po -I pu machine:0"));
    EXPECT_EQ(std::vector<std::uint32_t>(pus.begin(), pus.end()), t.pu_os_index);
    // Cores: hwloc's count, or one per PU where the machine has no Core objects.
    bool ok = false;
    const auto cores = pm::test::run_command(
        "hwloc-calc --if xml --input '" + f.string() + "' -N core machine:0", &ok);
    EXPECT_EQ(t.cores.size(), ok && !cores.empty() ? std::stoul(cores) : pus.size());
    EXPECT_EQ(t.packages, count_of(f, "package"));
    EXPECT_EQ(t.numa_nodes(), count_of(f, "numanode"));
    EXPECT_EQ(t.l3caches, count_of(f, "l3cache"));
    if (!ok || cores.empty()) continue;
    // A few cores: their PUs, package and NUMA node.
    for (std::uint32_t c : {0u, static_cast<std::uint32_t>(t.cores.size() / 2),
                            static_cast<std::uint32_t>(t.cores.size() - 1)}) {
      SCOPED_TRACE("core " + std::to_string(c));
      const auto& k = t.cores[c];
      const auto where = " core:" + std::to_string(c);
      const auto its = pm::test::numbers(pm::test::hwloc_calc(f, "--po -I pu" + where));
      EXPECT_EQ(std::vector<std::uint32_t>(its.begin(), its.end()),
                std::vector<std::uint32_t>(t.pu_os_index.begin() + k.first_pu,
                                           t.pu_os_index.begin() + k.first_pu + k.pu_count));
      const auto package = pm::test::hwloc_calc(f, "-I package" + where);
      EXPECT_EQ(k.package == none ? "" : std::to_string(k.package), package);
      const auto numa = pm::test::numbers(pm::test::hwloc_calc(f, "-I numa" + where));
      if (k.numa == none) {
        EXPECT_NE(numa.size(), 1u);  // its NUMA node is not allowed here (16amd64-8n2c-cpusets)
      } else {
        EXPECT_NE(std::find(numa.begin(), numa.end(), k.numa), numa.end());
      }
    }
  }
}

TEST_F(EveryMachine, DeviceLocalityAgreesWithHwlocCalc) {
  ASSERT_TRUE(pm::test::have_hwloc_calc())
      << "hwloc-calc is not installed (apt: hwloc; ./dev.sh test installs it)";
  for (const auto& f : files_) {
    SCOPED_TRACE(f.filename().string());
    const auto t = pm::topo::read_topology_xml(f.string());
    const auto check_numa = [&](std::uint32_t mine, const std::string& location) {
      SCOPED_TRACE(location);
      const auto theirs = pm::test::numbers(pm::test::hwloc_calc(f, "-I numa " + location));
      if (mine == none) {
        EXPECT_NE(theirs.size(), 1u);  // local to several NUMA nodes, or to none
      } else if (theirs.size() == 1) {
        EXPECT_EQ(theirs[0], mine);
      } else {
        EXPECT_NE(std::find(theirs.begin(), theirs.end(), mine), theirs.end());
      }
    };
    for (const auto& g : t.gpus) check_numa(g.numa, "pci=" + g.pci_bus_id);
    for (const auto& n : t.nics) check_numa(n.numa, "os=" + n.name);
  }
}

struct expected_gpu {
  gpu_vendor vendor;
  std::string bus;
  std::uint32_t numa;
};
struct expected_nic {
  std::string name, netdev;
  nic_kind kind;
  std::uint32_t numa;
};

// Written from `lstopo-no-graphics -v` on each file (PCI class and vendor, osdevs).
const std::map<std::string, std::pair<std::vector<expected_gpu>, std::vector<expected_nic>>>
    devices = {
        // 3 Tesla (3D, 0x0302); the Radeon is VGA but OpenCL names it; the Matrox is the BMC's.
        {"32em64t-2n8c2t-pci-normalio.xml",
         {{{gpu_vendor::nvidia, "0000:03:00.0", 0},
           {gpu_vendor::nvidia, "0000:83:00.0", 1},
           {gpu_vendor::nvidia, "0000:84:00.0", 1},
           {gpu_vendor::amd, "0000:84:00.1", 1}},
          {{"eth0", "eth0", nic_kind::ethernet, 1},
           {"eth1", "eth1", nic_kind::ethernet, 1},
           {"mlx5_0", "ib0", nic_kind::infiniband, 1}}}},
        // The ATI ES1000 (VGA, no compute backend) is the BMC's display, not a GPU.
        {"24em64t-2n6c2t-pci.xml",
         {{{gpu_vendor::nvidia, "0000:06:00.0", 0},
           {gpu_vendor::nvidia, "0000:11:00.0", 1},
           {gpu_vendor::nvidia, "0000:14:00.0", 1}},
          {{"eth0", "eth0", nic_kind::ethernet, 0},
           {"eth1", "eth1", nic_kind::ethernet, 0},
           {"mlx4_0", "eth2", nic_kind::infiniband, 0}}}},
        {"96em64t-4n4d3ca2co-pci.xml",
         {{},
          {{"eth0", "eth0", nic_kind::ethernet, 0},
           {"eth1", "eth1", nic_kind::ethernet, 0},
           {"eth2", "eth2", nic_kind::ethernet, 1},
           {"eth3", "eth3", nic_kind::ethernet, 1},
           {"eth4", "eth4", nic_kind::ethernet, 2},
           {"eth5", "eth5", nic_kind::ethernet, 2},
           {"eth6", "eth6", nic_kind::ethernet, 3},
           {"eth7", "eth7", nic_kind::ethernet, 3}}}},
        // Two Quadro (NVIDIA VGA) under packages without cpus: no NUMA node is theirs.
        {"64intel64-3g2n+2n-irregulargroups+pci.xml",
         {{{gpu_vendor::nvidia, "0002:01:00.0", none}, {gpu_vendor::nvidia, "0004:01:00.0", none}},
          {{"eth0", "eth0", nic_kind::ethernet, 0}, {"eth1", "eth1", nic_kind::ethernet, 0}}}},
        {"16intel64-manyVFs.xml",
         {{},
          {{"eth0", "eth0", nic_kind::ethernet, 0},
           {"eth1", "eth1", nic_kind::ethernet, 0},
           {"usnic_0", "eth4", nic_kind::ethernet, 0},
           {"usnic_1", "eth5", nic_kind::ethernet, 0},
           {"usnic_2", "eth6", nic_kind::ethernet, 1},
           {"eth7", "eth7", nic_kind::ethernet, 1}}}},
};

TEST_F(EveryMachine, GpusAndNicsOfTheMachinesThatHaveThem) {
  for (const auto& [file, want] : devices) {
    SCOPED_TRACE(file);
    const auto t = pm::topo::read_topology_xml((pm::test::topologies_dir() / file).string());
    ASSERT_EQ(t.gpus.size(), want.first.size());
    for (std::size_t i = 0; i < t.gpus.size(); ++i) {
      EXPECT_EQ(t.gpus[i].vendor, want.first[i].vendor);
      EXPECT_EQ(t.gpus[i].pci_bus_id, want.first[i].bus);
      EXPECT_EQ(t.gpus[i].numa, want.first[i].numa);
    }
    ASSERT_EQ(t.nics.size(), want.second.size());
    for (std::size_t i = 0; i < t.nics.size(); ++i) {
      EXPECT_EQ(t.nics[i].name, want.second[i].name);
      EXPECT_EQ(t.nics[i].netdev, want.second[i].netdev);
      EXPECT_EQ(t.nics[i].kind, want.second[i].kind);
      EXPECT_EQ(t.nics[i].numa, want.second[i].numa);
    }
  }
}

TEST_F(EveryMachine, Dgx2HasSixteenV100sInNvmlOrderWithTheirUuids) {
  const auto t =
      pm::topo::read_topology_xml((pm::test::topologies_dir() / "nvidiaDGX2.xml").string());
  ASSERT_EQ(t.gpus_of(gpu_vendor::nvidia), 16u);
  for (std::uint32_t i = 0; i < 16; ++i) {
    EXPECT_EQ(t.gpus[i].index, i);
    EXPECT_EQ(t.gpus[i].numa, i < 8 ? 0u : 1u);
    EXPECT_EQ(t.gpus[i].uuid.rfind("GPU-", 0), 0u);
    if (pm::test::have_hwloc_calc()) {  // nvmlI is the I-th GPU in PCI order: the same NUMA node
      EXPECT_EQ(pm::test::hwloc_calc(pm::test::topologies_dir() / "nvidiaDGX2.xml",
                                     "-I numa os=nvml" + std::to_string(i)),
                std::to_string(t.gpus[i].numa));
    }
  }
  EXPECT_EQ(t.gpus[0].uuid, "GPU-d3977428-7a30-086b-2e20-5c1eeed647c6");  // nvml0's NVIDIAUUID
  EXPECT_EQ(t.gpus[0].pci_bus_id, "0000:34:00.0");
  EXPECT_TRUE(t.nics.empty());
}

TEST(TopologyReader, HonoursHwlocXmlFile) {
  const auto file = pm::test::topologies_dir() / "32em64t-2n8c2t-pci-normalio.xml";
  ASSERT_TRUE(std::filesystem::exists(file)) << "no " << file;
  ::setenv("HWLOC_XMLFILE", file.c_str(), 1);
  const auto t = pm::topo::read_this_host();
  ::unsetenv("HWLOC_XMLFILE");
  EXPECT_EQ(t, pm::topo::read_topology_xml(file.string()));
  EXPECT_EQ(t.cores.size(), 16u);
}

TEST(TopologyReader, ThisMachineIsReadable) {
  const auto t = pm::topo::read_this_host();
  EXPECT_FALSE(t.cores.empty());
  EXPECT_EQ(pm::topo::topology_from_text(pm::topo::to_text(t)), t);
}

TEST(TopologyReader, AMissingFileIsOneLine) {
  try {
    pm::topo::read_topology_xml("/nonexistent/machine.xml");
    FAIL();
  } catch (const pm::error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/machine.xml"), std::string::npos);
  }
}

}  // namespace
