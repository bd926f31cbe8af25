/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_syscall.h: the riscv Linux system call convention, for the raw
 * system calls ../dbp/kh_dbp.c makes (kh_isa_syscall4(), ../kh_isa.h):
 * ecall, the number in a7, the arguments and
 * the result in a0-a3.
 */

#ifndef KH_SYSCALL_H
#define	KH_SYSCALL_H

#define	KH_SYSCALL_TRAP	"ecall"
#define	KH_SYSCALL_NR	"a7"
#define	KH_SYSCALL_A0	"a0"
#define	KH_SYSCALL_A1	"a1"
#define	KH_SYSCALL_A2	"a2"
#define	KH_SYSCALL_A3	"a3"

#endif
