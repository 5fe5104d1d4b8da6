package dev.cellm;

import java.util.ArrayList;
import java.util.List;

/**
 * Library-wide calls. The binding's native code is libcellm_jni.so, found like any JNI library (an Android app's
 * native library folder, or java.library.path); the system property {@code cellm.jni.library} names the file
 * instead. It finds libcellm.so beside itself.
 */
public final class Cellm {
    private Cellm() {}

    /** A backend plugin that libcellm found. */
    public record Backend(String name, String description) {}

    /**
     * Loads libcellm_jni.so now (the first native call would); an app may call it early, off its main thread, to
     * see a missing library at once (UnsatisfiedLinkError).
     */
    public static void loadLibrary() {
        CellmNative.load();
    }

    /** libcellm's SDK version, "major.minor" (cellm_version). */
    public static String version() {
        int[] v = CellmNative.version();
        return v[0] + "." + v[1];
    }

    /** The backend plugins found in the default folders (cellm_list_backends). */
    public static List<Backend> backends() {
        return backends(null);
    }

    /** The backend plugins found in the default folders and in pluginPath (may be null). */
    public static List<Backend> backends(String pluginPath) {
        byte[][] pairs = CellmNative.listBackends(CellmNative.utf8(pluginPath));
        List<Backend> out = new ArrayList<>(pairs.length / 2);
        for (int i = 0; i + 1 < pairs.length; i += 2) {
            out.add(new Backend(CellmNative.string(pairs[i]), CellmNative.string(pairs[i + 1])));
        }
        return out;
    }
}
