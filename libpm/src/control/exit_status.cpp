// exit_status's text, and signal names.
#include "pm/exit_status.hpp"

#include <signal.h>

#include <array>
#include <utility>

namespace pm {

namespace {

// The standard Linux signals by number (signal(7)); real-time signals and unknown numbers have no
// name here. A table rather than sigabbrev_np: the same text on every C library.
constexpr std::array<std::pair<int, const char*>, 31> signal_names{{
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"}, {SIGSTKFLT, "SIGSTKFLT"},
    {SIGCHLD, "SIGCHLD"}, {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},
    {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},
    {SIGXFSZ, "SIGXFSZ"}, {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
    {SIGIO, "SIGIO"},     {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"},
}};

}  // namespace

std::string signal_name(int signo) {
  for (const auto& [number, name] : signal_names) {
    if (number == signo) return name;
  }
  return "signal " + std::to_string(signo);
}

std::string exit_status::describe() const {
  if (is_signal()) return "was killed by " + signal_name(signal_);
  return "exited with code " + std::to_string(code_);
}

}  // namespace pm
