// Discovery accepts well-formed plugins and skips each kind of bad file with a reason, never failing.
#include "plugin/plugin_registry.h"

#include <gtest/gtest.h>

#include <fstream>

namespace fs = std::filesystem;

namespace cellm {
namespace {

const fs::path fakes = CELLM_FAKE_PLUGIN_DIR;

std::string reason_for(const PluginRegistry& r, const std::string& file) {
    for (const SkippedFile& s : r.skipped()) {
        if (s.file.filename() == file) return s.reason;
    }
    return "(not skipped)";
}

TEST(PluginRegistry, AcceptsGoodPluginsAndSkipsBadOnesWithAReason) {
    PluginRegistry r;
    r.add_file(fakes / "fake-good.so");
    r.add_file(fakes / "fake-newer-minor.so");
    r.add_file(fakes / "fake-duplicate.so");
    r.add_file(fakes / "fake-major2.so");
    r.add_file(fakes / "fake-declines.so");
    r.add_file(fakes / "fake-small-table.so");
    r.add_file(fakes / "fake-no-entry.so");
    r.add_file(fakes / "fake-null-table.so");
    r.add_file(fakes / "fake-throws.so");

    ASSERT_NE(r.find(CELLM_PLUGIN_FORMAT, "fake"), nullptr);
    EXPECT_EQ(r.find(CELLM_PLUGIN_FORMAT, "fake")->file.filename(), "fake-good.so");
    EXPECT_NE(r.find(CELLM_PLUGIN_FORMAT, "fake-newer"), nullptr) << "a newer minor of the same major is compatible";
    EXPECT_EQ(r.plugins(CELLM_PLUGIN_FORMAT).size(), 2u);

    EXPECT_NE(reason_for(r, "fake-duplicate.so").find("duplicate format plugin 'fake'"), std::string::npos);
    EXPECT_NE(reason_for(r, "fake-major2.so").find("built for ABI 2."), std::string::npos);
    EXPECT_NE(reason_for(r, "fake-declines.so").find("declined"), std::string::npos);
    EXPECT_NE(reason_for(r, "fake-small-table.so").find("too small"), std::string::npos);
    EXPECT_NE(reason_for(r, "fake-no-entry.so").find("not a cellm plugin"), std::string::npos);
    EXPECT_NE(reason_for(r, "fake-null-table.so").find("lacks a name, version or function table"), std::string::npos);
    EXPECT_NE(reason_for(r, "fake-throws.so").find("the entry point threw: this plugin fails to start"),
              std::string::npos);
}

TEST(PluginRegistry, FilesThatAreNotLibrariesAreSkipped) {
    const fs::path dir = fs::temp_directory_path() / "cellm-registry-test";
    fs::create_directories(dir);
    std::ofstream(dir / "notes.so") << "this is text, not a shared object";
    PluginRegistry r;
    r.add_directory(dir);
    r.add_directory(dir / "missing");  // a missing folder is quietly empty
    ASSERT_EQ(r.skipped().size(), 1u);
    EXPECT_NE(r.skipped()[0].reason.find("cannot load"), std::string::npos);
    EXPECT_TRUE(r.all().empty());
    fs::remove_all(dir);
}

TEST(PluginRegistry, TheSameFileIsLoadedOnce) {
    PluginRegistry r;
    EXPECT_TRUE(r.add_file(fakes / "fake-good.so"));
    EXPECT_FALSE(r.add_file(fakes / "." / "fake-good.so"));
    EXPECT_TRUE(r.skipped().empty());
}

TEST(PluginRegistry, DiscoverReadsCellmPluginPath) {
    ::setenv("CELLM_PLUGIN_PATH", (std::string("/nonexistent:") + fakes.string()).c_str(), 1);
    PluginRegistry r;
    r.discover();
    ::unsetenv("CELLM_PLUGIN_PATH");
    ASSERT_NE(r.find(CELLM_PLUGIN_FORMAT, "fake"), nullptr);
    EXPECT_EQ(r.find(CELLM_PLUGIN_FORMAT, "fake")->file.parent_path(), fs::canonical(fakes));
}

}  // namespace
}  // namespace cellm
