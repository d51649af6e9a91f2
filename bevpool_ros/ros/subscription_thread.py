"""A thread that takes some subscriptions' messages on a wait set of its own, beside rclpy's executor.

rclpy's SingleThreadedExecutor rebuilds its wait set in Python over all the node's entities on
every wake-up (ros/executor.py), and a DDS camera set woke it up to once per tensor. This thread
waits on just its subscriptions and a guard condition; its rcl wait set and the list of handles it
holds are made once, and again only when ``follow`` hands it another set of subscriptions (a
reader renewed or retired). Each wake-up re-adds those handles (rcl_wait clears the entries not
ready), takes one message from each ready one and calls the subscription's callback.

The executor leaves these subscriptions alone when they are made in the thread's ``group``: rclpy's
executors wait only on entities whose group ``can_execute`` them. rclpy's EventsExecutor (C++)
does not ask the group: under it, subscriptions stay the executor's.

Every handle is entered (``with handle``) while it is in the wait set: a subscription destroyed
meanwhile (node.destroy_subscription) is destroyed for real when the thread lets it go.
"""
from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from typing import Callable

from rclpy.callback_groups import CallbackGroup
from rclpy.exceptions import InvalidHandle
from rclpy.guard_condition import GuardCondition
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.subscription import Subscription

from ..thread_name import name_this_thread
from .liveness import INJECTED_STALL, injected_stall

STOP_WAIT_S = 2.0  # a callback that holds the thread longer than this is the watchdog's to judge


class ExecutorSkipsSubscriptions(CallbackGroup):
    """Subscriptions of this group are not waited on by rclpy's Python executors; anything else in
    it (a subscription's QoS-event handlers) still is."""

    def can_execute(self, entity) -> bool:
        return not isinstance(entity, Subscription)

    def beginning_execution(self, entity) -> bool:
        return True

    def ending_execution(self, entity) -> None:
        pass


class SubscriptionThread:
    def __init__(self, context, name: str, on_error: Callable[[object, Exception], None],
                 stall_when: Callable[[], bool] = lambda: True):
        """``context``: the node's rclpy Context; ``name``: the thread's; ``on_error(subscription
        or None, exception)``: a callback, a take or the wait failed (the thread goes on);
        ``stall_when()``: BEVPOOL_INJECT_STALL=input stalls the thread at a message once this is
        true (liveness.py)."""
        self.name = name
        self._stall_when = stall_when
        self.group = ExecutorSkipsSubscriptions()
        self._context = context
        self._on_error = on_error
        self._subs: tuple = ()
        self._wake = GuardCondition(None, None, context=context)
        self._running = False
        self._thread: threading.Thread | None = None
        self.thread_ident: int | None = None
        # when the thread woke with messages to take; None while it waits (the watchdog reads it)
        self.busy_since: float | None = None

    def follow(self, subscriptions) -> None:
        """Serve ``subscriptions`` from now on (the thread wakes to swap its wait set)."""
        if self._thread is None:
            return  # stopped: its guard condition is gone
        self._subs = tuple(subscriptions)
        self._wake.trigger()

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> bool:
        """Stop the thread (waiting at most STOP_WAIT_S); True when it has ended."""
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        self._running = False
        self._wake.trigger()
        thread.join(STOP_WAIT_S)
        self._wake.destroy()  # deferred by rcl while a stuck thread still holds it
        return not thread.is_alive()

    def _run(self) -> None:
        name_this_thread()
        self.thread_ident = threading.get_ident()
        while self._running:
            subs = self._subs
            try:
                with ExitStack() as held:
                    wait_set, live = self._wait_set(held, subs)
                    while self._running and subs is self._subs:
                        self._serve_once(wait_set, live)
            except Exception as e:  # noqa: BLE001 - the wait itself failed: say it, wait anew
                if not self._context.ok():
                    return
                self._on_error(None, e)
                time.sleep(0.1)
        # busy_since stays set when the thread ends any other way: the watchdog then names it

    def _wait_set(self, held: ExitStack, subs: tuple):
        """An rcl wait set for ``subs`` and the guard; their handles held by ``held``."""
        held.enter_context(self._context.handle)
        held.enter_context(self._wake.handle)
        live = []
        for sub in subs:
            try:
                held.enter_context(sub.handle)
            except InvalidHandle:  # destroyed before this thread saw it
                continue
            live.append(sub)
        wait_set = _rclpy.WaitSet(len(live), 1, 0, 0, 0, 0, self._context.handle)
        held.callback(wait_set.destroy_when_not_in_use)
        return wait_set, live

    def _serve_once(self, wait_set, live: list) -> None:
        wait_set.clear_entities()
        for sub in live:
            wait_set.add_subscription(sub.handle)
        wait_set.add_guard_condition(self._wake.handle)
        wait_set.wait(-1)
        self.busy_since = time.monotonic()
        for i, sub in enumerate(live):
            if wait_set.is_ready("subscription", i):
                self._take(sub)
        self.busy_since = None

    def _take(self, sub) -> None:
        try:
            with sub.handle:
                taken = sub.handle.take_message(sub.msg_type, sub.raw)
        except InvalidHandle:  # destroyed since the wait: its messages go with it
            return
        except Exception as e:  # noqa: BLE001
            self._on_error(sub, e)
            return
        if taken is None:
            return
        if INJECTED_STALL and self._stall_when():
            injected_stall("input")
        try:
            sub.callback(taken[0])
        except Exception as e:  # noqa: BLE001 - one bad message never ends the thread
            self._on_error(sub, e)
