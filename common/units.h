// Byte sizes and durations as people write and read them. Used by the option parser, the
// pool's reports and the gmem tool, so "12G" means the same thing everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gmem {

inline constexpr std::size_t k_kib = std::size_t{1} << 10;
inline constexpr std::size_t k_mib = std::size_t{1} << 20;
inline constexpr std::size_t k_gib = std::size_t{1} << 30;

// A size as written by a user: a plain byte count or a number with a binary suffix
// K/M/G/T (also KB, KiB, ... and lower case; all powers of 1024), optionally fractional
// ("1.5G"). Returns nothing for anything else, including overflow and negative numbers.
std::optional<std::uint64_t> parse_size(std::string_view text);

// A size or a share of a total: "8G", or "75%" (of `total`; fractional percentages allowed).
// A percentage needs total != 0; returns nothing otherwise.
struct size_or_percent {
  std::uint64_t bytes = 0; // when !is_percent
  double percent = 0;      // 0 < percent <= 100 when is_percent
  bool is_percent = false;
  std::uint64_t resolve(std::uint64_t total) const {
    return is_percent ? static_cast<std::uint64_t>(static_cast<double>(total) * percent / 100.0)
                      : bytes;
  }
};
std::optional<size_or_percent> parse_size_or_percent(std::string_view text);

// "1.50 GiB", "512 B", "3.00 MiB": three significant decimals above 1 KiB.
std::string format_bytes(std::uint64_t bytes);

// A duration as written by a user: "30s", "5m", "2h", "250ms", "1.5s"; a bare number is
// seconds. Returns nanoseconds.
std::optional<std::uint64_t> parse_duration_ns(std::string_view text);

// "850 ns", "12.3 us", "4.20 ms", "3.1 s", "2m05s", "1h02m".
std::string format_duration_ns(std::uint64_t ns);

} // namespace gmem
