/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * read(2) and ioctl(2) over a tiny file table.  kern_read() has a second
 * global name, sys_read_alias, at the same address, and this file has its
 * own static sysctl_handle() that clashes with the one in vm_fault.c.
 */

#include "sample.h"

struct read_args {
	int	fd;
	void	*buf;
	size_t	nbyte;
};

struct ioctl_args {
	int	fd;
	u_long	com;
	void	*data;
};

#define	FIONREAD	0x4004667fUL
#define	FIONBIO		0x8004667eUL
#define	FIOASYNC	0x8004667dUL
#define	FIOCLEX		0x20006601UL

struct file *fdtable[NFILE];
u_long read_bytes_total;
u_long ioctl_calls;

/* Clashes by name with the handler in vm_fault.c; see there. */
static __sample_func int
sysctl_handle(struct sysctl_oid *oidp, void *arg, long *valp)
{
	u_long *counter;

	counter = oidp->oid_arg;
	if (arg != NULL)
		*counter = 0;
	*valp = (long)*counter;
	return (0);
}

struct sysctl_oid sysctl_read_bytes = {
	.oid_name = "kern.read_bytes",
	.oid_handler = sysctl_handle,
	.oid_arg = &read_bytes_total,
};

__sample_func struct file *
fget(struct thread *td, int fd)
{
	struct file *fp;

	if (fd < 0 || fd >= NFILE)
		return (NULL);
	fp = fdtable[fd];
	if (fp == NULL || fp->f_owner != td->td_proc)
		return (NULL);
	return (fp);
}

__sample_func int
kern_read(struct thread *td, int fd, void *buf, size_t nbyte)
{
	struct file *fp;
	int error;

	SAMPLE_FRAME();
	fp = fget(td, fd);
	if (fp == NULL)
		return (EBADF);
	if (nbyte > 0x7fffffff)
		return (EINVAL);
	error = fp->f_ops->fo_read(fp, buf, nbyte, td);
	if (error == 0) {
		fp->f_offset += nbyte;
		read_bytes_total += nbyte;
		td->td_retval[0] = (register_t)nbyte;
	}
	return (error);
}

/* A second global name for kern_read: two symbols at one address. */
extern int sys_read_alias(struct thread *td, int fd, void *buf, size_t nbyte)
    __attribute__((__alias__("kern_read"), __used__));

__sample_func int
sys_read(struct thread *td, void *uap)
{
	struct read_args *ap;

	SAMPLE_FRAME();
	ap = uap;
	return (kern_read(td, ap->fd, ap->buf, ap->nbyte));
}

__sample_func int
kern_ioctl(struct thread *td, int fd, u_long com, void *data)
{
	struct file *fp;
	int error;

	SAMPLE_FRAME();
	ioctl_calls++;
	fp = fget(td, fd);
	if (fp == NULL)
		return (EBADF);
	switch (com) {
	case FIOCLEX:
		fp->f_flag |= 0x100;
		return (0);
	case FIONBIO:
		if (*(int *)data != 0)
			fp->f_flag |= 0x4;
		else
			fp->f_flag &= ~0x4;
		break;
	case FIOASYNC:
		if (*(int *)data != 0)
			fp->f_flag |= 0x40;
		else
			fp->f_flag &= ~0x40;
		break;
	case FIONREAD:
		*(int *)data = (int)(0x1000 - (fp->f_offset & 0xfff));
		return (0);
	default:
		break;
	}
	error = fp->f_ops->fo_ioctl(fp, com, data, td);
	if (error == ENOTTY && (com == FIONBIO || com == FIOASYNC))
		error = 0;
	return (error);
}

__sample_func int
sys_ioctl(struct thread *td, void *uap)
{
	struct ioctl_args *ap;
	long buf[16];
	int error;

	ap = uap;
	if (ap->data == NULL)
		return (EFAULT);
	memcpy(buf, ap->data, sizeof(buf));
	error = kern_ioctl(td, ap->fd, ap->com, buf);
	if (error == 0)
		memcpy(ap->data, buf, sizeof(buf));
	return (error);
}

static __sample_func int
null_read(struct file *fp __unused, void *buf, size_t len,
    struct thread *td __unused)
{

	memset(buf, 0, len);
	return (0);
}

static __sample_func int
null_ioctl(struct file *fp __unused, u_long com __unused, void *data __unused,
    struct thread *td __unused)
{

	return (ENOTTY);
}

const struct fileops null_fileops = {
	.fo_read = null_read,
	.fo_ioctl = null_ioctl,
};
