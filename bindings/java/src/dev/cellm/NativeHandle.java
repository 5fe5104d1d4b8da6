package dev.cellm;

import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.LongConsumer;

/**
 * A native pointer that cannot be used after it is freed: every call runs under the read lock with the pointer
 * still set, and freeing takes the write lock, so it waits for the calls in flight and later calls see 0 and
 * throw. As a Runnable it is the Cleaner's action: it must not reference the Engine or Session that owns it.
 */
final class NativeHandle implements Runnable {
    interface Call<T> {
        T apply(long pointer);
    }

    interface VoidCall {
        void apply(long pointer);
    }

    private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
    private final LongConsumer free;
    private final String what;
    private long pointer; // guarded by lock; 0 once freed

    NativeHandle(long pointer, LongConsumer free, String what) {
        this.pointer = pointer;
        this.free = free;
        this.what = what;
    }

    <T> T use(Call<T> call) {
        lock.readLock().lock();
        try {
            if (pointer == 0) throw CellmException.closed(what);
            return call.apply(pointer);
        } finally {
            lock.readLock().unlock();
        }
    }

    void run(VoidCall call) {
        use(p -> {
            call.apply(p);
            return null;
        });
    }

    boolean isFreed() {
        lock.readLock().lock();
        try {
            return pointer == 0;
        } finally {
            lock.readLock().unlock();
        }
    }

    /** Frees the pointer once the calls in flight have returned; later calls throw CLOSED. */
    @Override
    public void run() {
        lock.writeLock().lock();
        try {
            if (pointer == 0) return;
            long p = pointer;
            pointer = 0;
            free.accept(p);
        } finally {
            lock.writeLock().unlock();
        }
    }
}
