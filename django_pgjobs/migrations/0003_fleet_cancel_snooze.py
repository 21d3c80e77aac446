"""The fleet and cancel/snooze: the workers registry (``pgjobs_worker``), paused queues
(``pgjobs_queue_pause``), and on jobs the cancel request of a running job and the snooze count.
Additive only (nullable columns and a default of 0: no table rewrite on PostgreSQL 11+); workers of
the previous version keep working while it runs, and ignore the new tables."""


from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_pgjobs', '0002_store_v2'),
    ]

    operations = [
        migrations.CreateModel(
            name='QueuePause',
            fields=[
                ('queue', models.CharField(max_length=100, primary_key=True, serialize=False)),
                ('paused_at', models.DateTimeField()),
                ('paused_by', models.CharField(blank=True, default='', max_length=200)),
            ],
            options={
                'verbose_name': 'paused queue',
                'db_table': 'pgjobs_queue_pause',
                'ordering': ['queue'],
            },
        ),
        migrations.CreateModel(
            name='WorkerProcess',
            fields=[
                ('name', models.CharField(max_length=200, primary_key=True, serialize=False)),
                ('worker_id', models.CharField(max_length=200)),
                ('host', models.CharField(max_length=255)),
                ('pid', models.IntegerField()),
                ('queues', models.JSONField(default=list)),
                ('queue_limits', models.JSONField(default=dict)),
                ('concurrency', models.IntegerField()),
                ('version', models.CharField(max_length=50)),
                ('started_at', models.DateTimeField()),
                ('heartbeat_at', models.DateTimeField()),
                ('expires_at', models.DateTimeField()),
                ('in_flight', models.IntegerField(default=0)),
            ],
            options={
                'verbose_name': 'worker',
                'db_table': 'pgjobs_worker',
                'ordering': ['worker_id', 'name'],
            },
        ),
        migrations.AddField(
            model_name='job',
            name='cancel_requested_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='cancel_requested_by',
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='snoozes',
            field=models.IntegerField(db_default=0, default=0),
        ),
    ]
