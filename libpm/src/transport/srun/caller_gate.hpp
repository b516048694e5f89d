// caller_gate: which connecting caller becomes which host's agent stream (docs/slurm.md). Pure:
// no sockets, no clock; the srun transport feeds it what callers wrote, and so does the simulator
// (docs/simulator.md, "Connect-back"), so both take the very same decisions.
//
// A host is expected once its agent was started (expect) and until its stream is over or its
// agent can no longer call (forget). A caller is judged on the bytes it sent so far: more bytes
// are needed while its greeting line is incomplete; it is accepted as the host its greeting names
// when the token is the job's, the name is a host of the job that is expected and has no caller
// yet; anything else is refused with one line. Late callers (after forget), duplicates (a second
// caller for a host), forged ones (a wrong token) and strangers (a name that is no expected host)
// are refused; a host whose agent never calls is the link's to notice (the hello timeout). A name
// a caller sends is quoted in a refusal only through text::untrusted (printable ASCII, at most 64
// bytes): the caller is not authenticated yet.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace pm::srun {

class caller_gate {
 public:
  explicit caller_gate(std::string token) : token_(std::move(token)) {}

  /// `host`'s agent was started under the node name `node`: a caller may now become its stream.
  void expect(std::uint32_t host, std::string_view node);
  /// `host`'s stream is over, or its agent will not call any more: no caller is accepted for it.
  void forget(std::uint32_t host);
  /// True once a caller was accepted for `host` (and until forget).
  bool called(std::uint32_t host) const;

  struct verdict {
    enum kind_t { more, accept, refuse } kind = more;
    std::uint32_t host = 0;  ///< accept: the caller is this host's agent
    std::string why;         ///< refuse: one line (what the caller said in it is sanitized)
    /// refuse: the kind of refusal, a fixed text without anything the caller said ("wrong token",
    /// "not a host of this job", ...): what repeated refusals are counted by.
    std::string reason;
  };
  /// The bytes one caller sent so far (its greeting, as far as it came).
  verdict judge(std::string_view bytes);

 private:
  struct entry {
    std::uint32_t host = 0;
    bool expected = false;
    bool called = false;
  };
  std::string token_;
  std::unordered_map<std::string, entry> by_node_;  // model::host_key(node)
  std::unordered_map<std::uint32_t, std::string> node_of_;
};

}  // namespace pm::srun
