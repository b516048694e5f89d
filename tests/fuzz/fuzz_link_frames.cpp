// The agent link's byte stream below the messages: the preamble (noise, then the magic) and the
// frames, cut into chunks of every size. The first byte picks the chunk size (0: all at once)
// and whether the decoder's body limit is the real one or 1 KiB. Each frame's payload lies within
// what was received, data frames are never empty, and the end of stream is either clean or one
// error.
#include "fuzz_support.hpp"
#include "link/frame.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pm::fuzz;
  namespace link = pm::link;
  if (size == 0) return 0;
  const std::size_t chunk = data[0] & 0x7f;
  const std::size_t limit = (data[0] & 0x80) != 0 ? 1024 : link::max_frame_bytes;
  std::span<const std::uint8_t> rest(data + 1, size - 1);

  link::preamble_scanner scanner(512);
  link::frame_decoder decoder(limit);
  std::size_t received = 0, framed = 0;
  const bool ok = attempt([&] {
    while (!rest.empty()) {
      auto piece = rest.first(chunk == 0 ? rest.size() : std::min(rest.size(), chunk));
      rest = rest.subspan(piece.size());
      if (!scanner.found()) {
        const auto at = scanner.scan(piece);
        if (!at) continue;
        check(*at <= piece.size(), "the magic ends past the bytes scanned");
        piece = piece.subspan(*at);
      }
      decoder.feed(piece);
      received += piece.size();
      while (const auto f = decoder.next()) {
        const std::size_t overhead =
            f->kind == link::frame_kind::output                                        ? 10
            : f->kind == link::frame_kind::input || f->kind == link::frame_kind::relay ? 9
                                                                                       : 5;
        framed += overhead + f->payload.size();
        check(!f->payload.empty(), "a frame with an empty payload");
        check(f->payload.size() <= limit, "a frame larger than the limit");
        check(framed + decoder.buffered() == received, "frames and buffer do not add up");
      }
    }
    if (scanner.found()) decoder.finish();
  });
  if (ok && scanner.found()) check(decoder.buffered() == 0, "a clean end with bytes left over");
  check(scanner.noise_text().find('\n') == std::string::npos, "noise text spans several lines");
  return 0;
}
