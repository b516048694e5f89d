// Inputs the fuzz targets (tests/fuzz, docs/fuzzing.md) found to break a promise, each kept as
// the smallest reproduction, with what it must do now.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "link/messages.hpp"
#include "pm/allocation.hpp"
#include "pm/command_line.hpp"
#include "pm/error.hpp"

namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const pm::error& e) {
    return e.what();
  }
  return "no error";
}

// fuzz_command_line: an unknown option holding a newline made a two-line error.
TEST(FuzzRegressions, AnUnknownOptionWithANewlineIsQuotedOnOneLine) {
  const std::vector<std::string> args = {"-x\nFOO--hostfile", "hf", "app"};
  EXPECT_EQ(error_of([&] { pm::parse_command_line(args); }),
            "unknown option '-x\\nFOO--hostfile' (pmrun --help lists the options)");
}

// The same for every message that quotes a value (cli/messages.cpp): -np, --map-by, -mca.
TEST(FuzzRegressions, QuotedOptionValuesStayOnOneLine) {
  const auto one_line = [](std::vector<std::string> args) {
    const auto text = error_of([&] { pm::parse_command_line(args); });
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
    return text;
  };
  EXPECT_EQ(one_line({"-np", "4\n", "app"}), "-np '4\\n': not a number");
  EXPECT_EQ(one_line({"--map-by", "ppr:1:\tsocket", "app"}).find('\t'), std::string::npos);
  EXPECT_EQ(one_line({"-mca", "orte_abort_on_non_zero_status", "\r", "app"}).find('\r'),
            std::string::npos);
}

// fuzz_command_line: an unknown --env-profiles word holding a newline made a two-line error.
TEST(FuzzRegressions, AnUnknownEnvProfileWithANewlineIsQuotedOnOneLine) {
  const std::vector<std::string> args = {"--env-profiles",
                                         "ompi,a-\n\x01"
                                         "b",
                                         "app"};
  EXPECT_EQ(error_of([&] { pm::parse_command_line(args); }),
            "--env-profiles: unknown profile 'a-\\n\\x01b' (known: ompi, torch, tf, azureml, "
            "slurm, hydra, all, none, default)");
}

// fuzz_exports: a quoted empty word in plm_rsh_agent became an empty argument of ssh.
TEST(FuzzRegressions, AnEmptyQuotedWordInTheRemoteShellIsRefused) {
  EXPECT_EQ(error_of([] {
              pm::parse_command_line(
                  std::vector<std::string>{"-mca", "plm_rsh_agent", "ssh -o \"\" -x", "app"});
            }),
            "-mca plm_rsh_agent 'ssh -o \"\" -x': an empty word ('' or \"\")");
  EXPECT_EQ(
      error_of([] {
        pm::parse_command_line(std::vector<std::string>{"-mca", "plm_rsh_args", "-p ''", "app"});
      }),
      "-mca plm_rsh_args '-p ''': an empty word ('' or \"\")");
  pm::env_map env{{"PM_RSH_AGENT", "ssh ''"}};
  EXPECT_NE(error_of([&] { pm::resolve_remote_options({}, env); }).find("an empty word"),
            std::string::npos);
}

// fuzz_link_message: a hello of another protocol version (3) announcing 17 descriptors was read
// (only the version of such a hello is read), and writing it back then threw: no hello carries
// descriptors, of any version.
TEST(FuzzRegressions, AHelloOfAnotherVersionAnnouncingDescriptorsIsRefused) {
  const std::string body =
      "\x87\xa5\x61\x64\x64\x72\x73\x90\xa8\x68\x6f\x73\x74\x6e\x61\x6d"
      "\x65\xa0\xa5\x6e\x6f\x6e\x63\x74\x79\xa3\x66\x64\x73\x11\xa4\x70"
      "\x4f\x72\x74\x54\xa4\x74\x79\x70\x65\xa5\x68\x65\x6c\x6c\x6f\xa7"
      "\x76\x65\x72\x73\x69\x6f\x6e\x03";
  const std::vector<std::uint8_t> bytes(body.begin(), body.end());
  const std::string want =
      "agent link: 'hello' message announces 17 descriptors, more than the 0 it may carry";
  EXPECT_EQ(error_of([&] { pm::link::decode(bytes); }), want);
  EXPECT_EQ(error_of([&] { pm::link::decode_reference(bytes); }), want);
}

// fuzz_host_list (CI's 5-second run on a fresh clone, issue 20): a host listed twice added its
// slots with an unsigned wrap, 4294967295 + 1 = 0, and the parser returned a host without slots.
// The input is kept in tests/fuzz/corpus/fuzz_host_list/found-slot-overflow.
TEST(FuzzRegressions, RepeatedHostSlotsThatOverflowAreRefused) {
  EXPECT_EQ(error_of([] { pm::parse_host_list("a:4294967295,a:1"); }),
            "-H 'a:4294967295,a:1': host 'a' adds up to more than 4294967295 slots (overflow)");
}

}  // namespace
