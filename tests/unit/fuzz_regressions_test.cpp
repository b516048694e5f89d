// Inputs the fuzz targets (tests/fuzz, docs/fuzzing.md) found to break a promise, each kept as
// the smallest reproduction, with what it must do now.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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

}  // namespace
