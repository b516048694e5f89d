// stdin_forwarder: copies the launcher's standard input to the ranks that read it, for the cases
// where handing the descriptor itself over is wrong: a terminal (a rank in its own process group
// reading it would be stopped by SIGTTIN) and `--stdin all` (every rank must get every byte).
//
// It never reads a terminal while the launcher is in the background: it checks the terminal's
// foreground process group before every read and waits while it is not ours.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>
#include <vector>

namespace pm::driver {

class stdin_forwarder : public std::enable_shared_from_this<stdin_forwarder> {
 public:
  /// Reads `input_fd` (not owned; a private non-blocking description is opened for it) and
  /// writes everything to each of `targets` (pipe write ends, owned), closing them at end of input.
  static std::shared_ptr<stdin_forwarder> start(boost::asio::io_context& io, int input_fd,
                                                std::vector<int> targets);
  /// Stops reading and closes every target (the job ended).
  void stop();
  ~stdin_forwarder();

 private:
  struct target {
    std::unique_ptr<boost::asio::posix::stream_descriptor> pipe;
    std::string pending;   // bytes not yet written (bounded: reading pauses while any is full)
    std::string inflight;  // what the current async_write sends: pending may grow meanwhile
    bool writing = false;
  };
  stdin_forwarder(boost::asio::io_context& io, int input_fd, std::vector<int> targets);
  void read_some();
  void on_read(std::size_t n);
  void flush(std::size_t i);
  void maybe_resume();
  void finish_input();

  boost::asio::io_context& io_;
  bool is_tty_ = false;
  bool is_file_ = false;  // a regular file: epoll refuses it, so it is read without waiting
  int tty_fd_ = -1;       // the original descriptor, for the foreground check
  std::unique_ptr<boost::asio::posix::stream_descriptor> input_;
  boost::asio::steady_timer background_wait_;
  std::vector<target> targets_;
  std::vector<char> buffer_;
  bool reading_ = false;
  bool input_done_ = false;
  bool stopped_ = false;
};

}  // namespace pm::driver
