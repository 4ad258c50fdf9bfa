"""The watcher that ends a try at its deadline (app/services/send_deadline.py)."""
import socket
import threading

from app.services.send_deadline import Watcher


def test_a_deadline_sooner_than_those_watched_is_kept():
    """The watcher sleeps until the soonest deadline it knows; one sooner, added while a later one was watched, was
    kept only once that later one had passed (it was woken for a first deadline alone). A webhook try whose timeout
    had been lowered (a test changing WEBHOOK_TIMEOUT_SECONDS under a watcher that knew a try of the old one) ran on
    to the socket's own timeout."""
    watcher = Watcher()
    later = watcher.start(30)  # this thread's try, watched for 30 s
    ended = threading.Event()
    left, right = socket.socketpair()

    def sooner_try():
        deadline = watcher.start(0.2)
        deadline.watch(left, kept=False)
        left.settimeout(10)
        try:
            left.recv(1)  # nothing comes: only the deadline ends it
        except OSError:
            pass
        else:
            ended.set()  # shut down: recv answers b"" at once
        finally:
            watcher.end(deadline)

    thread = threading.Thread(target=sooner_try)
    thread.start()
    thread.join(15)
    watcher.end(later)
    left.close()
    right.close()
    assert ended.is_set()  # by the deadline, not by the socket's 10 s timeout (an OSError)
