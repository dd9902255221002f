#include "common/units.h"

#include <gtest/gtest.h>

namespace gmem {
namespace {

TEST(ParseSize, PlainAndSuffixed) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("512"), 512u);
  EXPECT_EQ(parse_size("4K"), 4096u);
  EXPECT_EQ(parse_size("4k"), 4096u);
  EXPECT_EQ(parse_size("2MiB"), 2u * k_mib);
  EXPECT_EQ(parse_size("2MB"), 2u * k_mib);
  EXPECT_EQ(parse_size("12G"), 12u * k_gib);
  EXPECT_EQ(parse_size("1.5G"), 3u * k_gib / 2);
  EXPECT_EQ(parse_size("1T"), 1024u * k_gib);
  EXPECT_EQ(parse_size("100 B"), 100u);
}

TEST(ParseSize, RejectsJunk) {
  for (const char* bad : {"", "G", "12X", "-1", "1e9", "1.2.3", "1.5", "12 GG", "0x10", "+5"})
    EXPECT_FALSE(parse_size(bad).has_value()) << bad;
  EXPECT_FALSE(parse_size("99999999999T").has_value());
}

TEST(ParseSizeOrPercent, Both) {
  auto p = parse_size_or_percent("75%");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->is_percent);
  EXPECT_EQ(p->resolve(1000), 750u);
  auto b = parse_size_or_percent("8G");
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->is_percent);
  EXPECT_EQ(b->resolve(1), 8u * k_gib);
  EXPECT_FALSE(parse_size_or_percent("0%"));
  EXPECT_FALSE(parse_size_or_percent("101%"));
  EXPECT_FALSE(parse_size_or_percent("%"));
  EXPECT_FALSE(parse_size_or_percent("5G%"));
}

TEST(FormatBytes, Units) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(3 * k_mib / 2), "1.50 MiB");
  EXPECT_EQ(format_bytes(12 * k_gib), "12.0 GiB");
  EXPECT_EQ(format_bytes(140 * k_gib), "140 GiB");
}

TEST(Duration, ParseAndFormat) {
  EXPECT_EQ(parse_duration_ns("30s"), 30000000000ull);
  EXPECT_EQ(parse_duration_ns("30"), 30000000000ull);
  EXPECT_EQ(parse_duration_ns("250ms"), 250000000ull);
  EXPECT_EQ(parse_duration_ns("5m"), 300000000000ull);
  EXPECT_EQ(parse_duration_ns("1.5s"), 1500000000ull);
  EXPECT_FALSE(parse_duration_ns("5 parsecs"));
  EXPECT_FALSE(parse_duration_ns("s"));
  EXPECT_EQ(format_duration_ns(850), "850 ns");
  EXPECT_EQ(format_duration_ns(12300), "12.3 us");
  EXPECT_EQ(format_duration_ns(125000000000ull), "2m05s");
}

} // namespace
} // namespace gmem
