#include "cli/messages.hpp"

#include "text/printable.hpp"

namespace pm::cli {
namespace {
// Quoted with control characters spelled out: a value may hold a newline, the message stays one
// line.
std::string q(std::string_view s) {
  return "'" + text::printable(s) + "'";
}
}  // namespace

std::string unknown_option(std::string_view arg) {
  // A command of its own, not an option of a launch (pmrun::run takes it first).
  if (arg == "--ps") return "--ps lists jobs and goes first: pmrun --ps [--dvm-uri URI]";
  return "unknown option " + q(arg) + " (pmrun --help lists the options)";
}
std::string missing_value(std::string_view option, std::string_view metavar) {
  return std::string(option) + ": missing value (expected " + std::string(metavar) + ")";
}
std::string unexpected_value(std::string_view option) {
  return std::string(option) + " takes no value with '='";
}
std::string empty_value(std::string_view option) {
  return std::string(option) + ": empty value";
}
std::string not_a_number(std::string_view option, std::string_view value) {
  return std::string(option) + " " + q(value) + ": not a number";
}
std::string out_of_range(std::string_view option, std::string_view value, const std::string& min,
                         const std::string& max) {
  return std::string(option) + " " + q(value) + ": out of range (" + min + ".." + max + ")";
}
std::string np_zero(std::string_view option) {
  return std::string(option) + " 0: at least one rank is needed";
}
std::string recovery_both() {
  return "--enable-recovery and --disable-recovery contradict each other: give one";
}
std::string bad_seconds(std::string_view option, std::string_view value) {
  return std::string(option) + " " + q(value) + ": expected a positive number of seconds";
}
std::string bad_seconds_or_zero(std::string_view option, std::string_view value) {
  return std::string(option) + " " + q(value) +
         ": expected a number of seconds, 0 or more (0: never)";
}
std::string unknown_output_mode(std::string_view option, std::string_view mode) {
  return std::string(option) + ": unknown output mode " + q(mode) +
         " (tag, timestamp, merge-stderr-to-stdout, json-lines, dir=DIR)";
}
std::string bad_boolean(std::string_view option, std::string_view key, std::string_view value) {
  return std::string(option) + " " + text::printable(key) + " " + q(value) +
         ": expected a boolean (1, 0, true, false, yes or no)";
}
std::string misplaced_app_file(std::string_view option, std::string_view file) {
  return text::printable(std::string(option) + " " + q(file) +
                         ": an app file goes among the options before any program");
}
std::string app_file_and_program(std::string_view option, std::string_view file,
                                 std::string_view program) {
  return text::printable(std::string(option) + " " + q(file) +
                         ": the app file names the programs; " + q(program) +
                         " follows on the command line");
}
std::string second_app_file(std::string_view option, std::string_view first) {
  return text::printable(std::string(option) + " given twice (the first: " + q(first) +
                         "): one app file names the whole job");
}
std::string empty_app_file(std::string_view option, std::string_view file) {
  return text::printable(std::string(option) + " " + q(file) + ": no app context in the file");
}
std::string empty_mca_key(std::string_view option, std::string_view value) {
  return text::printable(std::string(option) + " '' " + q(value) +
                         ": empty parameter name (expected " + std::string(option) + " KEY VALUE)");
}
std::string bad_variable_boolean(std::string_view variable, std::string_view value) {
  return text::printable(std::string(variable) + "=" + q(value) +
                         " in the environment: expected a boolean (1, 0, true, false, yes or no)");
}
std::string second_hostfile(std::string_view option, std::string_view first,
                            std::string_view second) {
  return std::string(option) + " " + q(second) + ": a hostfile was already given (" + q(first) +
         ")";
}
std::string bad_interface(std::string_view option, std::string_view value, std::string_view item) {
  return text::printable(
      std::string(option) + " " + q(value) + ": " +
      (item.empty() ? std::string("empty item") : "invalid interface or network " + q(item)) +
      " (expected names such as eth0 or networks such as 10.0.0.0/24)");
}
std::string not_absolute(std::string_view option, std::string_view value) {
  return text::printable(std::string(option) + " " + q(value) + ": expected an absolute path");
}
std::string bad_launch_shape(std::string_view option, std::string_view value) {
  return text::printable(std::string(option) + " " + q(value) + ": expected auto, flat or tree");
}
std::string no_program() {
  return "no program to run (usage: pmrun [OPTIONS] PROGRAM [ARGS...])";
}
std::string no_program_in_segment(std::size_t segment) {
  return "MPMD segment " + std::to_string(segment + 1) + " has no program to run";
}
std::string refuse_root() {
  return "refusing to run as root: pass --allow-run-as-root (or set OMPI_ALLOW_RUN_AS_ROOT=1 and "
         "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1), as mpirun requires";
}
std::string stdin_rank_outside(std::uint32_t rank, std::uint32_t size) {
  return "--stdin " + std::to_string(rank) + ": the job has only " + std::to_string(size) +
         " ranks";
}

}  // namespace pm::cli
