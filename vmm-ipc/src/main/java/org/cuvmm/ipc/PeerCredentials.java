package org.cuvmm.ipc;

/**
 * The process at the other end of a Unix-domain socket, as the kernel saw it when the
 * connection was made ({@code SO_PEERCRED}): it cannot be forged by the peer.
 *
 * @param pid the peer's process id
 * @param uid the peer's effective user id
 * @param gid the peer's effective group id
 */
public record PeerCredentials(int pid, int uid, int gid) {
    @Override
    public String toString() { return "pid " + pid + ", uid " + uid + ", gid " + gid; }
}
